"""The vocabulary every layer shares; no Ray.

* :mod:`tuner.core.params`: the names of parameters and metrics (``opt/lr``), spec paths
  (``param_space.opt.lr``) and the one walk over a nested tree; Ray's own result keys.
* :mod:`tuner.core.best`: the best-trial rule, its scopes, a trial's best checkpoint, finite
  metric values.

The bottom layer but for :mod:`tuner.errors`: it imports no other module of tuner.
"""
