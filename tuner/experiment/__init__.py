"""The experiment folder: its files' names, atomic writes, where it lives, export; no Ray.

* :mod:`tuner.experiment.layout`: every file and folder name in an experiment folder (defined
  once; writers and readers import it);
* :mod:`tuner.experiment.files`: atomic (write, then rename) file writes;
* :mod:`tuner.experiment.storage`: a local folder or a cloud URI (pyarrow), the local mirror;
* :mod:`tuner.experiment.export`: ``tuner export``, a trial's best checkpoint in a new folder.
"""
