"""The configuration of :class:`verl.api.ppo.PPOTrainer`: the documents' keys (``batch_size``, ``lr``, ``kl_coef``,
``algorithm``, ...) mapped onto ``main_ppo``'s, over the packaged ``ppo_trainer`` config and validated as the CLI
validates it (:func:`build_ppo_config`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

# document key -> the main_ppo keys it sets (kl_coef and algorithm are handled by build_ppo_config)
DOC_KEYS: dict[str, tuple[str, ...]] = {
    "batch_size": ("actor_rollout_ref.actor.ppo_mini_batch_size",),
    "rollout_batch_size": ("data.train_batch_size",),
    "lr": ("actor_rollout_ref.actor.optim.lr",),
    "critic_lr": ("critic.optim.lr",),
    "num_samples": ("actor_rollout_ref.rollout.n",),
    "max_prompt_length": ("data.max_prompt_length",),
    "max_response_length": ("data.max_response_length",),
    "max_new_tokens": ("data.max_response_length",),
    "temperature": ("actor_rollout_ref.rollout.temperature",),
    "ppo_epochs": ("actor_rollout_ref.actor.ppo_epochs",),
    "micro_batch_size": ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "critic.ppo_micro_batch_size_per_gpu"),
    "clip_ratio": ("actor_rollout_ref.actor.clip_ratio",),
    "entropy_coeff": ("actor_rollout_ref.actor.entropy_coeff",),
    "gamma": ("algorithm.gamma",),
    "lam": ("algorithm.lam",),
    "seed": ("trainer.seed",),
    "total_steps": ("trainer.total_training_steps",),
    "output_dir": ("trainer.default_local_dir",),
    "device": ("trainer.device",),
    "enable_profiling": ("trainer.enable_profiling",),
    "enable_debug_mode": ("trainer.enable_debug_mode",),
    "allow_unsafe_operations": ("trainer.allow_unsafe_operations",),
}
SPECIAL_DOC_KEYS = ("algorithm", "kl_coef", "kl_controller")
# the documents' ``kl_controller`` block: each key lands in ``algorithm.kl_ctrl.<key>``
KL_CONTROLLER_KEYS = ("type", "kl_coef", "target_kl", "kl_coef_max", "horizon")
# the documents' algorithm names -> algorithm.adv_estimator (registered estimator names are accepted as they are)
ALGORITHM_ALIASES = {"ppo": "gae", "reinforce++": "reinforce_plus_plus", "reinforce": "reinforce_plus_plus"}
# API defaults, below the user's keys: one process, the local backend, no console/file loggers (use exporters)
API_DEFAULTS: dict[str, Any] = {
    "trainer.backend": "local",
    "trainer.nnodes": 1,
    "trainer.n_gpus_per_node": 1,
    "trainer.logger": [],
    "trainer.val_before_train": False,
    "trainer.export_hf": False,
    "trainer.plot": False,
    "trainer.report.enable": False,
    "trainer.default_local_dir": "outputs/verl_api",
}


def build_ppo_config(
    user: Mapping[str, Any] | DictConfig,
    has_critic: bool = False,
    namespace: str | None = None,
    kl_in_reward: bool = False,
    rollout_engine: str | None = None,
) -> DictConfig:
    """The validated ``ppo_trainer`` config for the given document keys and dotted ``main_ppo`` keys.

    Layers, later wins: ``ppo_trainer.yaml`` < ``demo.yaml`` < :data:`API_DEFAULTS` < document keys (:data:`DOC_KEYS`,
    ``algorithm``, ``kl_coef``, ``kl_controller``) < dotted keys. ``algorithm`` defaults to ``ppo`` with a critic
    and ``grpo`` without; ``ppo`` uses ``rollout.n = 1``. ``kl_coef`` sets the KL-in-reward coefficient
    (``algorithm.kl_ctrl.kl_coef``, ``use_kl_in_reward``) for ``ppo``, with a ``kl_controller`` block or when
    ``kl_in_reward`` (the built-in KL reward), else the actor's KL loss (``kl_loss_coef``, ``use_kl_loss``).
    ``kl_controller`` (``type``, ``kl_coef``, ``target_kl``, ``kl_coef_max``, ``horizon``) maps onto
    ``algorithm.kl_ctrl`` and puts the KL in the reward, where the controller acts. A missing ``batch_size`` /
    ``rollout_batch_size`` takes the other one's value. Raises :class:`verl.trainer.config.ConfigError` naming every
    bad key or value.
    """
    from verl.trainer.config import ConfigError, PPOConfig, validate_config
    from verl.trainer.config.loader import Override, apply_overrides, packaged_config_text

    if isinstance(user, DictConfig):
        user = OmegaConf.to_container(user, resolve=True)  # type: ignore[assignment]
    if not isinstance(user, Mapping):
        raise ConfigError(f"PPOTrainer config must be a mapping of keys to values, got {type(user).__name__}")
    doc = {k: v for k, v in user.items() if "." not in k}
    dotted = {k: v for k, v in user.items() if "." in k}
    unknown = [k for k in doc if k not in DOC_KEYS and k not in SPECIAL_DOC_KEYS]
    if unknown:
        raise ConfigError(
            [
                f"config key {k!r} is neither a document key ({', '.join(sorted([*DOC_KEYS, *SPECIAL_DOC_KEYS]))}) "
                "nor a dotted main_ppo key such as 'actor_rollout_ref.rollout.n'"
                for k in unknown
            ]
        )
    settings: dict[str, Any] = dict(API_DEFAULTS)
    estimator = _algorithm_settings(doc.get("algorithm"), has_critic, settings)
    if estimator == "gae":
        settings["actor_rollout_ref.rollout.n"] = 1
    if rollout_engine is not None:
        settings["actor_rollout_ref.rollout.name"] = rollout_engine
    for key, value in doc.items():
        for target in DOC_KEYS.get(key, ()):
            settings[target] = value
    if "batch_size" in doc and "rollout_batch_size" not in doc:
        settings["data.train_batch_size"] = doc["batch_size"]
    if "rollout_batch_size" in doc and "batch_size" not in doc:
        settings["actor_rollout_ref.actor.ppo_mini_batch_size"] = doc["rollout_batch_size"]
    settings.update(_kl_settings(doc.get("kl_coef"), doc.get("kl_controller"), kl_in_reward, estimator == "gae"))
    if namespace is not None:
        settings["trainer.namespace"] = namespace
    settings.update(dotted)

    # the API keeps the embedded demo's quick sizes (small batches, GRPO groups of 4) under its own defaults
    cfg = OmegaConf.merge(
        OmegaConf.create(packaged_config_text(PPOConfig.config_name)),
        OmegaConf.create(packaged_config_text(PPOConfig.demo_config_name)),
    )
    added = apply_overrides(cfg, [Override("set", k, v, f"{k}={v!r}") for k, v in settings.items()])
    OmegaConf.resolve(cfg)
    # the same default-fitting as the CLI: keys the API user gave are checked, defaults adapt
    PPOConfig.adapt_defaults(cfg, set(settings) - set(API_DEFAULTS))
    validate_config(cfg, PPOConfig, extra_keys=added)
    return cfg


def _algorithm_settings(value: Any, has_critic: bool, settings: dict[str, Any]) -> str:
    """Put the document's ``algorithm`` (a name, or a :class:`verl.trainer.BaseAlgorithm`) into ``settings``;
    returns the advantage estimator's registered name."""
    from verl.algorithms.registry import AdvantageEstimator
    from verl.trainer.config import ConfigError

    custom = _as_algorithm(value)
    if custom is not None:
        # a BaseAlgorithm subclass: its advantage and loss join the registries the driver and workers read
        custom.register()
        settings.update(custom.config_overrides())
        return custom.registry_name()
    algo = str(value if value is not None else ("ppo" if has_critic else "grpo")).lower()
    estimator = ALGORITHM_ALIASES.get(algo, algo)
    if estimator not in {e.value for e in AdvantageEstimator}:
        known = sorted({e.value for e in AdvantageEstimator} | set(ALGORITHM_ALIASES))
        raise ConfigError(
            f"config algorithm={value!r}: unknown; expected one of {', '.join(known)} "
            "or a verl.trainer.BaseAlgorithm subclass"
        )
    settings["algorithm.adv_estimator"] = estimator
    return estimator


def _kl_settings(kl_coef: Any, kl_controller: Any, kl_in_reward: bool, gae: bool) -> dict[str, Any]:
    """Where the KL acts: in the reward through ``algorithm.kl_ctrl`` (with a ``kl_controller`` block, with
    ``kl_in_reward``: the built-in KL reward, or for PPO (``gae``) when ``kl_coef`` is given), else ``kl_coef`` is the
    actor's KL-loss coefficient."""
    settings: dict[str, Any] = {}
    kl_block = _kl_controller_settings(kl_controller, kl_coef)
    if kl_block or kl_in_reward or (kl_coef is not None and gae):
        settings["algorithm.use_kl_in_reward"] = True
        if kl_coef is not None:
            settings["algorithm.kl_ctrl.kl_coef"] = kl_coef
        settings.update(kl_block)
    elif kl_coef is not None:
        settings["actor_rollout_ref.actor.use_kl_loss"] = float(kl_coef) > 0
        settings["actor_rollout_ref.actor.kl_loss_coef"] = kl_coef
    return settings


def _as_algorithm(value: Any) -> Any:
    """A :class:`verl.trainer.BaseAlgorithm` instance for ``value`` (an instance or a subclass), else None."""
    from verl.algorithms.base_algorithm import BaseAlgorithm

    if isinstance(value, type) and issubclass(value, BaseAlgorithm):
        return value()
    return value if isinstance(value, BaseAlgorithm) else None


def _kl_controller_settings(block: Any, kl_coef: Any) -> dict[str, Any]:
    """``algorithm.kl_ctrl.*`` settings of the documents' ``kl_controller`` block (empty when it is absent).

    Raises :class:`ConfigError` for a block that is not a mapping, an unknown key, or a ``kl_coef`` that
    contradicts the top-level ``kl_coef``."""
    from verl.trainer.config import ConfigError

    if block is None:
        return {}
    if not isinstance(block, Mapping):
        raise ConfigError(
            f"config kl_controller must be a mapping of {', '.join(KL_CONTROLLER_KEYS)}, got {type(block).__name__}"
        )
    unknown = [k for k in block if k not in KL_CONTROLLER_KEYS]
    if unknown:
        raise ConfigError(
            [f"config kl_controller.{k}: unknown key; expected one of {', '.join(KL_CONTROLLER_KEYS)}" for k in unknown]
        )
    if kl_coef is not None and "kl_coef" in block and float(block["kl_coef"]) != float(kl_coef):
        raise ConfigError(
            f"config kl_coef={kl_coef!r} and kl_controller.kl_coef={block['kl_coef']!r} disagree; give one of them"
        )
    return {f"algorithm.kl_ctrl.{k}": v for k, v in block.items()}
