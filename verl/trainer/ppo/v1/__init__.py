"""Upstream verl v0.9's ``verl.trainer.ppo.v1`` package: the V1 trainer's module paths.

``utils`` holds the advantage of multi-output agent loops
(:func:`~verl.trainer.ppo.v1.utils.compute_advantage_for_multi_trajectories`); the ``trainer_*`` modules name the
V1 trainer classes. The trainers themselves are this package's drivers (:mod:`verl.trainer.ppo.ray_trainer` and
the asynchronous ones); docs/porting_from_verl.md maps the names.
"""
