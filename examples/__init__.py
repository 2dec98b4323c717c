"""Example train functions for ``tuner``: ``examples.mnist.train`` and ``examples.cifar.train``."""
