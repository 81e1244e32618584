"""Upstream verl v0.9 keys that are a second name of one of ours, reconciled before validation; and the checks of
the v0.9 values we cannot honour.

Upstream v0.9 moved Ulysses sequence parallelism into the engine section
(``actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size``, PR "engine workers"), while January-2026
scripts set ``actor_rollout_ref.actor.ulysses_sequence_parallel_size``. Both names are one setting here: whichever
the user set wins and the other follows it, so the resolved config shows the same size under both; setting both to
different sizes is an error. The reference follows the actor unless one of its own keys is set (upstream's default,
``ref.ulysses_sequence_parallel_size: ${actor...}``); the critic has the same pair.

The deprecated global micro-batch sizes of older scripts (``actor.ppo_micro_batch_size``,
``rollout/ref.log_prob_micro_batch_size``, ``critic.ppo_micro_batch_size``, ``critic.forward_micro_batch_size``) are
divided by the data-parallel ranks into their ``*_per_gpu`` keys, as upstream's workers do
(``verl/workers/fsdp_workers.py``: ``ppo_micro_batch_size //= world_size // ulysses_size``); giving both is refused.

Single switches that upstream spells several times or under another name become the one key here: every
``full_determinism`` -> ``trainer.deterministic``, ``model.use_liger`` -> ``model.use_fused_kernels``,
``fsdp_config.mixed_precision.param_dtype`` -> ``fsdp_config.model_dtype``; and upstream's
nulls that mean "not given" get this project's value (``data.seed`` -> ``trainer.seed``, January's
``reward_model.micro_batch_size_per_gpu`` with no reward model served -> the default).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.sections.rollout import agent_loops_on
from verl.trainer.config.strategies import IMPLEMENTED_STRATEGIES
from verl.trainer.config.validation import ConfigError

_SP = "ulysses_sequence_parallel_size"


def _set_by_user(key: str, user_keys: set[str]) -> bool:
    """Whether the user set ``key`` itself (an override or their YAML), not only a section above it."""
    return key in user_keys


def _reconcile(cfg: DictConfig, section: str, user_keys: set[str], follow: str | None) -> dict[str, Any]:
    """Make ``<section>.ulysses_sequence_parallel_size`` and ``<section>.fsdp_config.ulysses_...`` one value."""
    node = cfg
    for part in section.split("."):
        node = node[part]
    old_key, new_key = f"{section}.{_SP}", f"{section}.fsdp_config.{_SP}"
    fsdp = node.get("fsdp_config")
    if not isinstance(fsdp, DictConfig) or _SP not in fsdp or _SP not in node:
        return {}
    old_set, new_set = _set_by_user(old_key, user_keys), _set_by_user(new_key, user_keys)
    if old_set and new_set and node[_SP] != fsdp[_SP]:
        raise ConfigError(
            f"{new_key}={fsdp[_SP]} and {old_key}={node[_SP]}: one setting under two names (upstream v0.9 and "
            f"earlier); give one of them"
        )
    if new_set:
        value = fsdp[_SP]
    elif old_set:
        value = node[_SP]
    elif follow is not None:
        value = follow
    else:
        value = node[_SP]
    changed = {}
    for key, parent in ((old_key, node), (new_key, fsdp)):
        if parent[_SP] != value:
            parent[_SP] = value
            changed[key] = value
    return changed


# deprecated global micro-batch sizes (section, old key, per-rank key, section whose ulysses size divides the ranks);
# upstream's fsdp_workers divide them by (world size // ulysses size) into the *_per_gpu keys
_ACTOR = "actor_rollout_ref.actor"
_GLOBAL_MICRO_SIZES = (
    (_ACTOR, "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu", _ACTOR),
    ("actor_rollout_ref.rollout", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu", _ACTOR),
    ("actor_rollout_ref.ref", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu", _ACTOR),
    ("critic", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu", "critic"),
    ("critic", "forward_micro_batch_size", "forward_micro_batch_size_per_gpu", "critic"),
)


def _section(cfg: DictConfig, dotted: str) -> Any:
    node = cfg
    for part in dotted.split("."):
        node = node[part]
    return node


def _per_rank_micro_sizes(cfg: DictConfig, user_keys: set[str]) -> dict[str, Any]:
    """Deprecated global micro-batch sizes -> the per-rank keys (as upstream verl's workers compute them).

    A per-rank key set this way joins ``user_keys``, so the micro-batch default fitting leaves it alone.
    """
    ranks = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)
    changed: dict[str, Any] = {}
    for section, old, new, sp_section in _GLOBAL_MICRO_SIZES:
        node = _section(cfg, section)
        value = node.get(old)
        if value is None:
            continue
        old_key, new_key = f"{section}.{old}", f"{section}.{new}"
        if _set_by_user(new_key, user_keys):
            raise ConfigError(
                f"{old_key}={value} and {new_key}={node[new]}: the global size is deprecated (upstream verl refuses "
                f"both too); give only {new_key}"
            )
        dp = max(ranks // int(_section(cfg, sp_section)[_SP]), 1)
        if not isinstance(value, int) or isinstance(value, bool) or value < dp:
            raise ConfigError(
                f"{old_key}={value!r}: a global micro-batch size must be an integer >= the {dp} data-parallel ranks "
                f"it is divided over ({new} = {old} // {dp}); or set {new_key}"
            )
        node[new] = value // dp
        node[old] = None  # its value now lives in the per-rank key (the typed sections refuse both set)
        user_keys.add(new_key)
        changed[new_key] = value // dp
    return changed


# upstream v0.9's per-engine determinism switches (enable_full_determinism: deterministic kernels, seeded ranks);
# here one switch covers every worker: trainer.deterministic
_DETERMINISM_KEYS = (
    "actor_rollout_ref.actor.fsdp_config.full_determinism",
    "actor_rollout_ref.ref.fsdp_config.full_determinism",
    "actor_rollout_ref.rollout.full_determinism",
    "critic.fsdp_config.full_determinism",
)


def _full_determinism(cfg: DictConfig, user_keys: set[str]) -> dict[str, Any]:
    """Upstream's ``full_determinism`` keys -> ``trainer.deterministic`` (true when any is true), then removed:
    they are one setting here. ``trainer.deterministic=false`` set by the user beside a true one is an error."""
    asked = []
    for key in _DETERMINISM_KEYS:
        parent_key, _, leaf = key.rpartition(".")
        parent = OmegaConf.select(cfg, parent_key)
        if isinstance(parent, DictConfig) and leaf in parent:
            if bool(parent[leaf]):
                asked.append(key)
            del parent[leaf]
    if not asked or bool(cfg.trainer.deterministic):
        return {}
    if _set_by_user("trainer.deterministic", user_keys):
        raise ConfigError(
            f"{asked[0]}=true and trainer.deterministic=false: one setting here (deterministic kernels for every "
            "worker); keep trainer.deterministic"
        )
    cfg.trainer.deterministic = True
    return {"trainer.deterministic": True}


def _data_seed(cfg: DictConfig) -> dict[str, Any]:
    """``data.seed: null`` (upstream v0.9's default: an unseeded shuffle) -> ``trainer.seed``, so the data order is
    still one a resumed run can check and repeat."""
    if "seed" in cfg.data and cfg.data.seed is None:
        cfg.data.seed = cfg.trainer.seed
        return {"data.seed": cfg.data.seed}
    return {}


def _null_reward_micro_batch(cfg: DictConfig) -> dict[str, Any]:
    """``reward_model.micro_batch_size_per_gpu: null`` (verl's January default) with no reward model served: the
    schema's default, so the copy loads; a served reward model needs a size (the type check says so)."""
    from verl.sections.reward_model import RewardModelConfig

    rm = cfg.reward_model
    if "micro_batch_size_per_gpu" in rm and rm.micro_batch_size_per_gpu is None and not rm.enable:
        rm.micro_batch_size_per_gpu = RewardModelConfig.micro_batch_size_per_gpu
        return {"reward_model.micro_batch_size_per_gpu": rm.micro_batch_size_per_gpu}
    return {}


def _liger(cfg: DictConfig) -> dict[str, Any]:
    """``model.use_liger=true`` -> ``model.use_fused_kernels=true``: Liger's kernel for the LM head is a fused linear
    cross-entropy, which is the chunked head here (its other kernels change speed only)."""
    model = cfg.actor_rollout_ref.model
    if model.use_liger and not model.use_fused_kernels:
        model.use_fused_kernels = True
        return {"actor_rollout_ref.model.use_fused_kernels": True}
    return {}


_BF16 = {"bf16", "bfloat16"}


def _mixed_precision_param_dtype(cfg: DictConfig, user_keys: set[str]) -> dict[str, Any]:
    """``fsdp_config.mixed_precision.param_dtype`` (verl's FSDP key) is ``fsdp_config.model_dtype`` here: FSDP2
    gathers parameters in it. Given, it sets ``model_dtype``; both set to different dtypes is an error."""
    changed: dict[str, Any] = {}
    for section in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic"):
        fsdp = OmegaConf.select(cfg, f"{section}.fsdp_config")
        mixed = fsdp.mixed_precision
        if not isinstance(mixed, DictConfig):
            continue  # ill-typed: the schema validation names it
        from verl.sections.engine import MixedPrecisionConfig

        try:
            parsed = MixedPrecisionConfig(**OmegaConf.to_container(mixed, resolve=True))
        except (TypeError, ValueError) as e:
            known = "param_dtype, reduce_dtype, buffer_dtype"
            why = str(e) if isinstance(e, ValueError) else f"its keys are {known}"
            raise ConfigError(f"{section}.fsdp_config.mixed_precision={dict(mixed)}: {why}") from e
        if parsed.param_dtype is None:
            continue
        wanted, current = str(parsed.param_dtype), str(fsdp.model_dtype)
        if (wanted in _BF16) == (current in _BF16):
            continue
        key = f"{section}.fsdp_config.model_dtype"
        if _set_by_user(key, user_keys):
            raise ConfigError(
                f"{section}.fsdp_config.mixed_precision.param_dtype={wanted} and {key}={current}: one setting here "
                "(the dtype FSDP gathers parameters in for compute); keep one"
            )
        fsdp.model_dtype = wanted
        changed[key] = wanted
    return changed


def adapt_upstream_keys(cfg: DictConfig, user_keys: set[str]) -> dict[str, Any]:
    """Reconcile upstream's second names of our keys in place (see the module docstring); turn the deprecated
    global micro-batch sizes into the per-rank ones, upstream's ``full_determinism`` switches into
    ``trainer.deterministic``, ``data.seed: null`` into ``trainer.seed``, January's null reward micro-batch size into
    the default, ``model.use_liger`` into ``model.use_fused_kernels`` and ``mixed_precision.param_dtype`` into
    ``model_dtype``. Returns ``{dotted key: new value}`` of what
    changed.

    Raises:
        ConfigError: when both names of one setting are given different values.
    """
    changed = _full_determinism(cfg, user_keys)
    changed.update(_data_seed(cfg))
    changed.update(_null_reward_micro_batch(cfg))
    changed.update(_liger(cfg))
    changed.update(_mixed_precision_param_dtype(cfg, user_keys))
    changed.update(_reconcile(cfg, "actor_rollout_ref.actor", user_keys, None))
    actor_sp = cfg.actor_rollout_ref.actor.get(_SP)
    ref_keys = (f"actor_rollout_ref.ref.{_SP}", f"actor_rollout_ref.ref.fsdp_config.{_SP}")
    ref_own = any(_set_by_user(k, user_keys) for k in ref_keys)
    changed.update(_reconcile(cfg, "actor_rollout_ref.ref", user_keys, None if ref_own else actor_sp))
    changed.update(_reconcile(cfg, "critic", user_keys, None))
    changed.update(_per_rank_micro_sizes(cfg, user_keys))
    return changed


def check_upstream_values(cfg: DictConfig, errors: list[str]) -> None:
    """Values of upstream v0.9 keys that select behaviour this project does not have: one error each, with the fix."""
    arr = cfg.actor_rollout_ref
    ref_strategy = str(arr.ref.strategy)
    if ref_strategy not in IMPLEMENTED_STRATEGIES:
        errors.append(
            f"actor_rollout_ref.ref.strategy={ref_strategy!r} is not implemented (the reference is FSDP2, like the "
            f"actor); use one of {', '.join(IMPLEMENTED_STRATEGIES)}"
        )
    for key in ("data_parallel_size", "expert_parallel_size", "pipeline_model_parallel_size"):
        size = int(arr.rollout[key])
        if size != 1:
            errors.append(
                f"actor_rollout_ref.rollout.{key}={size}: that rollout layout is not implemented here (each engine "
                "serves one group of tensor_model_parallel_size actor ranks, and every group is a replica); set it to 1"
            )
    for path, section in (
        ("actor_rollout_ref.actor", arr.actor),
        ("actor_rollout_ref.ref", arr.ref),
        ("critic", cfg.critic),
    ):
        qat = section.fsdp_config.get("qat") or {}
        if qat.get("enable"):
            errors.append(
                f"{path}.fsdp_config.qat.enable=true: quantization-aware training (upstream's NVFP4 fake quantization) "
                "is not implemented here; train without it (bf16 or fp32) and quantize the exported model"
            )
    from verl.trainer.config.profiler_checks import check_profiler

    check_profiler(cfg, errors)
    from verl.utils.prefix_grouper_checks import config_errors as prefix_grouper_errors

    errors.extend(prefix_grouper_errors(cfg))  # actor.use_prefix_grouper with settings it cannot serve
    if bool(arr.rollout.ignore_eos) and agent_loops_on(arr.rollout):
        errors.append(
            "actor_rollout_ref.rollout.ignore_eos=true with agent loops (rollout.multi_turn.enable or mode=async) is "
            "not implemented "
            "here: a turn ends at EOS; use ignore_eos with single-turn generation"
        )
