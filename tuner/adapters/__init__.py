"""The Ray adapters: every Ray internal tuner touches, and the state files Ray saves.

* :mod:`tuner.adapters.ray_internals`: each private Ray module, attribute or hook tuner uses,
  behind one function, constant or mixin, checked against Ray 2.60 (no other module touches
  one; ``tests/test_ray_internals.py`` checks both);
* :mod:`tuner.adapters.state`: Ray Tune's experiment state (``experiment_state-*.json``),
  read for resume and report without importing Ray.
"""
