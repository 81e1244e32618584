"""The RL algorithms as pure tensor functions: the floor below workers and trainer.

Nothing here knows about models, workers or the driver, so the actor and critic (``verl.workers``) and the driver
(``verl.trainer``) both import from here and neither reaches into the other.

- ``core_algos``: the public surface (verl's names); ``verl.trainer.ppo.core_algos`` is this same module object, so
  code that reads or patches ``core_algos.ADV_ESTIMATOR_REGISTRY`` sees what ``register_adv_est`` registers.
- ``registry``: name -> function registries, ``AdvantageEstimator``, config access.
- ``advantage``: advantage estimators; ``advantage_gdpo`` (GDPO), ``advantage_otb`` (optimal token baselines).
- ``policy_loss``: policy losses; ``policy_loss_trust_region`` (DPPO-TV/KL, DRO, SAPO), ``policy_loss_bypass``
  (bypass-mode loss and REINFORCE).
- ``rollout_correction``, ``rollout_rejection``: importance weights and rejection for the rollout/trainer mismatch.
- ``losses``: loss aggregation, value and entropy losses.
- ``kl``: KL penalties and KL controllers.
- ``base_algorithm``: ``BaseAlgorithm``, a class-based way to register an estimator and a loss together.
"""
