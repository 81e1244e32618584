"""Upstream verl's ``verl.trainer.config.algorithm``: the ``algorithm`` section's dataclasses.

The classes are this project's (:mod:`verl.trainer.config.schema`, one definition each); ``AlgoConfig`` is
upstream's name of :class:`~verl.trainer.config.schema.AlgorithmConfig`.
"""

from verl.trainer.config.schema import AlgorithmConfig, FilterGroupsConfig, KLControlConfig, RolloutCorrectionConfig

AlgoConfig = AlgorithmConfig

__all__ = ["AlgoConfig", "AlgorithmConfig", "FilterGroupsConfig", "KLControlConfig", "RolloutCorrectionConfig"]
