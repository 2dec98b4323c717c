"""Running an experiment on Ray: spec to Ray objects, ``Tuner.fit()``, results.

* :mod:`tuner.run.engine`: ``tune_model``, ``tuner run`` and ``tuner resume``;
* :mod:`tuner.run.cluster`: the embedded local Ray or a cluster, Ray Jobs;
* :mod:`tuner.run.trainable`: the Tune trainable (one process, a DDP group, a class);
* :mod:`tuner.run.reporting`: the console, TensorBoard, W&B and MLflow during a run;
* :mod:`tuner.run.failures`: first-error abort, time budget, lock, state snapshots;
* :mod:`tuner.run.results`: ``TuneResult`` and the files a run leaves behind;
* :mod:`tuner.run.measure`: seconds per iteration for the forecast.
"""
