"""Upstream verl's (pre-v0.9) ``verl.experimental.dataset``: see :mod:`verl.experimental.dataset.sampler`."""
