"""Implementation modules behind ``verl.trainer.ppo.core_algos`` (import from there; this split is internal).

- ``registry``: name -> function registries, ``AdvantageEstimator``, config access.
- ``advantage``: advantage estimators.
- ``policy_loss``: policy losses.
- ``losses``: loss aggregation, value and entropy losses.
- ``kl``: KL penalties and KL controllers.
"""
