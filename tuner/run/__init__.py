"""Running an experiment on Ray: spec to Ray objects, ``Tuner.fit()``, results.

* :mod:`tuner.run.prepare`: a spec (or an experiment to resume) checked and planned, before Ray Tune starts;
* :mod:`tuner.run.engine`: ``tune_model``, ``tuner run`` and ``tuner resume`` on Ray Tune;
* :mod:`tuner.run.cluster`: the embedded local Ray or a cluster, Ray Jobs;
* :mod:`tuner.run.trainable`: the Tune trainable (one process, a DDP group, a class);
* :mod:`tuner.run.console`: the console during a run (the table, the progress line, a full disk);
* :mod:`tuner.run.loggers`: Ray Tune's logger callbacks (JSON/CSV, TensorBoard HParams, W&B, MLflow);
* :mod:`tuner.run.failures`: first-error abort, time budget, lock, state snapshots;
* :mod:`tuner.run.results`: ``TuneResult`` and the files a run leaves behind;
* :mod:`tuner.run.measure`: seconds per iteration for the forecast.
"""
