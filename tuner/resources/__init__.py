"""What a trial asks for, and how many trials fit: CPUs, GPUs, DDP workers, ``gpu: auto``.

* :mod:`tuner.resources.sizing`: each trial's resource request, the cluster's nodes, how many
  trials fit at once;
* :mod:`tuner.resources.gpu_packing`: ``gpu: auto``'s policy: the probe, the memory per
  config, each trial's share of a GPU;
* :mod:`tuner.resources.gpu_callback`: ``gpu: auto`` in the driver, Ray Tune's events to the
  experiment's packer.
"""

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    """tuner 0.1's ``tuner.resources`` module is :mod:`tuner.resources.sizing`: its names still import from here."""
    sizing = importlib.import_module("tuner.resources.sizing")
    if name in sizing.__all__:
        return getattr(sizing, name)
    raise AttributeError(f"module 'tuner.resources' has no attribute {name!r}")
