"""Cross-field checks of a PPO config: batch-size arithmetic, registered names, and combinations that cannot work.

Batch sizes follow verl's conventions: ``data.train_batch_size`` and ``*.ppo_mini_batch_size`` count *prompts*;
each prompt yields ``rollout.n`` sequences, which are split evenly over the data-parallel world
``W = trainer.nnodes * trainer.n_gpus_per_node``; ``*_micro_batch_size_per_gpu`` counts *sequences on one rank*.
So one rank sees ``ppo_mini_batch_size * n / W`` sequences per mini-batch, which it processes in micro-batches of
``ppo_micro_batch_size_per_gpu`` (gradient accumulation), unless ``use_dynamic_bsz`` packs micro-batches by tokens.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config import algorithm_checks as algo_checks
from verl.trainer.config.hf_decode_checks import check_hf_decode
from verl.trainer.config.multi_turn_checks import check_multi_turn
from verl.trainer.config.parallel_checks import check_implemented, check_placement, sp_size
from verl.trainer.config.partial_rollout_checks import check_sync_partial_rollout
from verl.trainer.config.remote_code_checks import remote_code_errors
from verl.trainer.config.roles_in_use import critic_enabled, need_reference_policy
from verl.trainer.config.section_rules import check_section_rules
from verl.trainer.config.spo_checks import check_spo
from verl.trainer.config.validation import independent_problems, run_check


def registered_names(module: str, attr: str) -> list[str] | None:
    """The names in registry ``module.attr`` (keys of a mapping, or the items), or None when it does not exist yet.

    Enum keys count by their value, so a registry keyed by ``AdvantageEstimator.GAE`` accepts ``"gae"``.
    """
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        # Only a missing registry module is tolerated; a registry module that fails to import is a real bug.
        if e.name is not None and (module == e.name or module.startswith(e.name + ".")):
            return None
        raise
    registry: Any = getattr(mod, attr, None)
    if not registry:  # absent, or not populated yet: nothing to check against
        return None
    keys: Iterable[Any] = registry.keys() if hasattr(registry, "keys") else registry
    return sorted(str(getattr(k, "value", k)) for k in keys)


def _check_registered(value: str, path: str, module: str, attr: str, errors: list[str]) -> None:
    names = registered_names(module, attr)
    if names is not None and str(value) not in names:
        close = difflib.get_close_matches(str(value), names, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        errors.append(
            f"{path}: {value!r} is not a registered name; registered in {module}.{attr}: {', '.join(names)}{hint}"
        )


def _check_positive(cfg: DictConfig, paths: Iterable[str], errors: list[str], minimum: int = 1) -> None:
    for path in paths:
        value = OmegaConf.select(cfg, path)
        if value is not None and value < minimum:
            errors.append(f"{path}: must be >= {minimum}, got {value}")


def _check_mini_micro(
    errors: list[str],
    who: str,
    mini: int,
    micro: int,
    dynamic: bool,
    train_bs: int,
    n: int,
    world: int,
    world_expr: str,
) -> None:
    """The mini-/micro-batch arithmetic of one trained model (``who`` is the config prefix, e.g. ``critic``)."""
    if mini > train_bs:
        errors.append(
            f"{who}.ppo_mini_batch_size={mini} is larger than data.train_batch_size={train_bs}; "
            f"a mini-batch is a slice of the prompts of one step, so it must be <= {train_bs}"
        )
        return
    if train_bs % mini != 0:
        errors.append(
            f"data.train_batch_size={train_bs} is not a multiple of {who}.ppo_mini_batch_size={mini} "
            f"({train_bs} % {mini} = {train_bs % mini}); each step must split into whole mini-batches"
        )
    seqs = mini * n
    if seqs % world != 0:
        errors.append(
            f"{who}.ppo_mini_batch_size * actor_rollout_ref.rollout.n = {mini} * {n} = {seqs} sequences per "
            f"mini-batch do not split evenly over world size {world_expr} = {world} ({seqs} % {world} = "
            f"{seqs % world})"
        )
        return
    per_rank = seqs // world
    if dynamic:
        return
    if micro > per_rank:
        errors.append(
            f"{who}.ppo_micro_batch_size_per_gpu={micro} is larger than the {per_rank} sequences one rank gets per "
            f"mini-batch ({who}.ppo_mini_batch_size * rollout.n / world = {mini} * {n} / {world} = {per_rank}); "
            f"use a micro-batch size that divides {per_rank}, or set {who}.use_dynamic_bsz=true"
        )
    elif per_rank % micro != 0:
        errors.append(
            f"({who}.ppo_mini_batch_size * rollout.n / world) = ({mini} * {n} / {world}) = {per_rank} sequences "
            f"per rank is not a multiple of {who}.ppo_micro_batch_size_per_gpu={micro} ({per_rank} % {micro} = "
            f"{per_rank % micro}); use a micro-batch size that divides {per_rank} "
            f"({', '.join(_divisors(per_rank))}), or set {who}.use_dynamic_bsz=true"
        )


MICRO_BATCH_KEYS = ("actor_rollout_ref.actor", "critic")


def _user_set(key: str, user: set[str]) -> bool:
    return key in user or any(key.startswith(u + ".") for u in user)


def fit_mini_batch_defaults(cfg: DictConfig, user_keys: Iterable[str]) -> dict[str, int]:
    """Lower the ``ppo_mini_batch_size`` defaults the user did not set to ``data.train_batch_size`` when above it.

    Upstream's default mini-batch (256 prompts) is larger than a small run's whole step (e.g.
    ``data.train_batch_size=16``): an unset mini-batch then means "the whole step", one optimizer step per epoch. A
    mini-batch the user set is left alone and still checked. Returns ``{key: new value}`` changed.
    """
    user = set(user_keys)
    changed: dict[str, int] = {}
    try:
        batch = int(cfg.data.train_batch_size)
    except (TypeError, ValueError, AttributeError):
        return changed
    actor_key = "actor_rollout_ref.actor.ppo_mini_batch_size"
    for prefix in MICRO_BATCH_KEYS:
        key = f"{prefix}.ppo_mini_batch_size"
        # the critic's mini-batch follows the actor's unless set itself (``${actor...}`` in the YAML)
        if _user_set(key, user) or (prefix == "critic" and _user_set(actor_key, user)):
            continue
        section = OmegaConf.select(cfg, prefix)
        try:
            current = int(section.ppo_mini_batch_size)
        except (TypeError, ValueError, AttributeError):
            continue
        if batch > 0 and current > batch:
            section.ppo_mini_batch_size = batch
            changed[key] = batch
    return changed


def fit_micro_batch_defaults(cfg: DictConfig, user_keys: Iterable[str]) -> dict[str, int]:
    """Lower the ``ppo_micro_batch_size_per_gpu`` defaults the user did not set so they fit the mini-batch.

    A default must never be the reason a run is rejected: with ``ppo_mini_batch_size * rollout.n / (world / sp)``
    sequences per rank and mini-batch, an unset micro-batch size becomes the largest divisor of that count not
    above the default (e.g. default 32, 4 sequences per rank -> 4). A size the user set (a key in ``user_keys``,
    dotted, or a parent section of it) is left alone, so :func:`check_ppo_config` still reports it when it does
    not fit. Values of the wrong type are skipped (validation names them). Returns ``{key: new value}`` changed.
    """
    user = set(user_keys)
    changed: dict[str, int] = {}
    try:
        world = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)
        n = int(cfg.actor_rollout_ref.rollout.n)
    except (TypeError, ValueError, AttributeError):
        return changed
    for prefix in MICRO_BATCH_KEYS:
        key = f"{prefix}.ppo_micro_batch_size_per_gpu"
        if key in user or any(key.startswith(u + ".") for u in user):
            continue
        section = OmegaConf.select(cfg, prefix)
        try:
            ranks = world // sp_size(section)
            per_rank = int(section.ppo_mini_batch_size) * n // ranks
            current = int(section.ppo_micro_batch_size_per_gpu)
        except (TypeError, ValueError, AttributeError, ZeroDivisionError):
            continue
        if per_rank <= 0 or current <= 0 or per_rank % current == 0:
            continue
        fitted = max(d for d in range(1, min(current, per_rank) + 1) if per_rank % d == 0)
        section.ppo_micro_batch_size_per_gpu = fitted
        changed[key] = fitted
    return changed


def _divisors(n: int, limit: int = 12) -> list[str]:
    """The divisors of ``n`` (the valid micro-batch sizes), at most ``limit`` of them shown."""
    divs = [str(d) for d in range(1, n + 1) if n % d == 0]
    return divs if len(divs) <= limit else [*divs[: limit - 1], "...", divs[-1]]


def check_value_ranges(cfg: DictConfig, use_critic: bool, errors: list[str]) -> None:
    """Values outside their meaningful range, caught before any model loads: learning rates, optimizer constants,
    sampling temperatures and top-p, clip ratios, and ``trust_remote_code`` without the unsafe-operations switch."""
    arr = cfg.actor_rollout_ref
    if int(cfg.trainer.max_degenerate_reward_steps) < 0:
        errors.append(
            f"trainer.max_degenerate_reward_steps={cfg.trainer.max_degenerate_reward_steps} must be >= 0 "
            "(0: never stop on a degenerate reward)"
        )
    if (steps := int(cfg.trainer.warn_no_tool_call_steps)) < 0:
        errors.append(f"trainer.warn_no_tool_call_steps={steps} must be >= 0 (0: never warn)")
    if not float(cfg.trainer.log_prob_gap_warn_kl) >= 0:
        errors.append(f"trainer.log_prob_gap_warn_kl={cfg.trainer.log_prob_gap_warn_kl} must be >= 0 (0: never warn)")
    optims = [("actor_rollout_ref.actor.optim", arr.actor.optim)]
    if use_critic:
        optims.append(("critic.optim", cfg.critic.optim))
    for prefix, optim in optims:
        if optim.lr is not None and float(optim.lr) < 0:
            errors.append(f"{prefix}.lr={optim.lr} must be >= 0")
        if optim.get("weight_decay") is not None and float(optim.weight_decay) < 0:
            errors.append(f"{prefix}.weight_decay={optim.weight_decay} must be >= 0")
        if optim.get("eps") is not None and float(optim.eps) <= 0:
            errors.append(f"{prefix}.eps={optim.eps} must be > 0 (it keeps Adam's division finite)")
        betas = optim.get("betas")
        if betas is not None and not (len(betas) == 2 and all(0 <= float(b) < 1 for b in betas)):
            errors.append(f"{prefix}.betas={list(betas)} must be two numbers in [0, 1)")
    for prefix, sampling in (
        ("actor_rollout_ref.rollout", arr.rollout),
        ("actor_rollout_ref.rollout.val_kwargs", arr.rollout.val_kwargs),
    ):
        temperature = float(sampling.temperature)
        if temperature < 0:
            errors.append(f"{prefix}.temperature={sampling.temperature} must be >= 0")
        elif sampling.do_sample and temperature == 0:
            errors.append(
                f"{prefix}.temperature=0 with {prefix}.do_sample=true divides the logits by zero; use a "
                "temperature > 0, or do_sample=false for greedy decoding"
            )
        if not 0 < float(sampling.top_p) <= 1:
            errors.append(f"{prefix}.top_p={sampling.top_p} must be in (0, 1]")
    for key in ("clip_ratio", "clip_ratio_low", "clip_ratio_high"):
        value = arr.actor.get(key)
        if value is not None and float(value) < 0:
            errors.append(f"actor_rollout_ref.actor.{key}={value} must be >= 0")
    # the data section's tokenizer/processor is the actor model's (or its tokenizer_path)
    model = cfg.actor_rollout_ref.model
    paths = {
        "data": model.tokenizer_path or model.path,
        "actor_rollout_ref.model": model.path,
        "critic.model": OmegaConf.select(cfg, "critic.model.path"),
        "reward_model.model": OmegaConf.select(cfg, "reward_model.model.path"),
    }
    requested = [
        (f"{prefix}.trust_remote_code", path)
        for prefix, path in paths.items()
        if isinstance(section := OmegaConf.select(cfg, prefix), DictConfig) and section.get("trust_remote_code")
    ]
    errors.extend(remote_code_errors(requested, bool(cfg.trainer.allow_unsafe_operations)))


def check_distillation_and_judge(cfg: DictConfig, errors: list[str]) -> None:
    """``distillation`` (a teacher path when enabled, ``coef > 0``, ``task_reward_weight >= 0``) and
    ``reward_model.judge`` (an endpoint or a model for its backend, when the judge reward manager is chosen; a pool
    for the ``judge`` role only with ``backend=worker``)."""
    dist = cfg.get("distillation")
    if dist is not None and dist.get("enable"):
        several = len([k for k in dist.get("teacher_models", {}) if k != "teacher_model"]) > 1  # routed teachers
        if not dist.teacher.path and not several:
            errors.append("distillation.teacher.path: distillation.enable=true needs the teacher's model path")
        if dist.coef <= 0:
            errors.append(f"distillation.coef={dist.coef} must be > 0")
        if dist.task_reward_weight < 0:
            errors.append(f"distillation.task_reward_weight={dist.task_reward_weight} must be >= 0")
    rm = cfg.reward_model
    judge = rm.get("judge")
    if judge is not None and rm.reward_manager == "judge":
        if judge.backend == "openai" and not judge.url:
            errors.append("reward_model.judge.url: reward_manager=judge with backend=openai needs the endpoint's URL")
        if judge.backend in ("hf", "worker") and not judge.model:
            errors.append(
                f"reward_model.judge.model: reward_manager=judge with backend={judge.backend} needs the judge's "
                "model path"
            )
        if judge.max_concurrency < 1:
            errors.append(f"reward_model.judge.max_concurrency={judge.max_concurrency} must be >= 1")
    if judge is not None and judge.overlap_rollout:
        from verl.experimental.agent_loop.judge_overlap import overlap_config_errors

        errors.extend(overlap_config_errors(cfg))
    mapping = cfg.trainer.get("resource_pool_mapping") or {}
    if "judge" in mapping and not (rm.reward_manager == "judge" and judge is not None and judge.backend == "worker"):
        errors.append(
            f"trainer.resource_pool_mapping.judge={mapping['judge']!r}: only a judge worker group is placed on a pool; "
            "set reward_model.reward_manager=judge reward_model.judge.backend=worker (or drop the key)"
        )


def check_async_training(cfg: DictConfig, errors: list[str]) -> None:
    """``async_training``: values in range; ``partial_rollout`` and the fully-async schedule keys only with
    ``mode=fully_async``; the rollout's log-probs available for ``use_rollout_log_probs``; the stages a queued
    rollout cannot go through refused (ReMax's greedy baseline, DAPO's regeneration)."""
    at = cfg.get("async_training")
    if at is None:
        return
    prefix = "async_training"
    if float(at.staleness_threshold) < 0:
        errors.append(f"{prefix}.staleness_threshold={at.staleness_threshold} must be >= 0 (0: on-policy)")
    for key in ("trigger_parameter_sync_step", "require_batches"):
        if int(at.get(key)) < 1:
            errors.append(f"{prefix}.{key}={at.get(key)} must be >= 1")
    mode = at.mode
    if at.partial_rollout and mode == "one_step_off":
        errors.append(
            f"{prefix}.partial_rollout=true continues responses across weight pushes with mode=fully_async, or "
            f"across steps in synchronous training (mode=null); one_step_off rollouts are whole batches"
        )
    if mode is None:
        if at.use_rollout_log_probs:
            errors.append(
                f"{prefix}.use_rollout_log_probs=true acts in asynchronous training only (set {prefix}.mode); "
                "synchronously use algorithm.rollout_correction.bypass_mode"
            )
        return
    if at.use_rollout_log_probs:
        if not cfg.actor_rollout_ref.rollout.calculate_log_probs:
            errors.append(
                f"{prefix}.use_rollout_log_probs=true needs the rollout's log-probs: set "
                "actor_rollout_ref.rollout.calculate_log_probs=true"
            )
        rc = cfg.algorithm.get("rollout_correction") or {}
        set_keys = [k for k in ("rollout_is", "rollout_rs", "rollout_token_veto_threshold") if rc.get(k) is not None]
        if set_keys:
            errors.append(
                f"{prefix}.use_rollout_log_probs=true makes the rollout's log-probs the old policy, so "
                f"algorithm.rollout_correction.{set_keys[0]} would weigh nothing: set it to null"
            )
    if str(cfg.algorithm.adv_estimator) == "remax":
        errors.append(f"{prefix}.mode={mode}: algorithm.adv_estimator=remax needs a greedy rollout per step")
    if cfg.algorithm.filter_groups.enable:
        errors.append(f"{prefix}.mode={mode}: algorithm.filter_groups regenerates within a step; not supported")


def check_namespace(cfg: DictConfig, errors: list[str]) -> None:
    """``trainer.namespace``: a name that is safe as one path component."""
    if cfg.trainer.get("namespace") is None:
        return
    from verl.utils.fs import validate_namespace

    try:
        validate_namespace(cfg.trainer.namespace)
    except ValueError as err:
        errors.append(f"trainer.namespace: {err}")


def check_positive_sizes(cfg: DictConfig, use_critic: bool, errors: list[str]) -> None:
    """Batch sizes, lengths, counts and ranks that must be positive (or non-negative), and report steps from 1."""
    _check_positive(
        cfg,
        [
            "data.train_batch_size",
            "data.max_prompt_length",
            "data.max_response_length",
            "data.val_batch_size",
            "actor_rollout_ref.rollout.n",
            "actor_rollout_ref.rollout.val_kwargs.n",
            "actor_rollout_ref.actor.ppo_mini_batch_size",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
            "actor_rollout_ref.actor.ppo_epochs",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
            "actor_rollout_ref.rollout.tensor_model_parallel_size",
            "trainer.nnodes",
            "trainer.n_gpus_per_node",
            "trainer.total_epochs",
        ],
        errors,
    )
    _check_positive(
        cfg,
        [
            "actor_rollout_ref.model.lora_rank",
            "trainer.critic_warmup",
            "data.dataloader_num_workers",
            "trainer.log_val_generations",
            "trainer.report.num_samples",
        ],
        errors,
        minimum=0,
    )
    bad_steps = [s for s in (OmegaConf.select(cfg, "trainer.report.sample_steps") or []) if int(s) < 1]
    if bad_steps:
        errors.append(f"trainer.report.sample_steps: steps count from 1, got {bad_steps}")
    if use_critic:
        _check_positive(
            cfg,
            ["critic.ppo_mini_batch_size", "critic.ppo_micro_batch_size_per_gpu", "critic.ppo_epochs"],
            errors,
        )


def check_batch_division(cfg: DictConfig, use_critic: bool, errors: list[str]) -> None:
    """The step's sequences split evenly over the ranks, and the actor's (and critic's) mini-batches into
    micro-batches per rank (:func:`_check_mini_micro`); the critic counts the actor's ``rollout.n``."""
    trainer, actor = cfg.trainer, cfg.actor_rollout_ref.actor
    world = trainer.nnodes * trainer.n_gpus_per_node
    world_expr = f"trainer.nnodes * trainer.n_gpus_per_node = {trainer.nnodes} * {trainer.n_gpus_per_node}"
    train_bs, n = cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n
    if (train_bs * n) % world != 0:
        errors.append(
            f"data.train_batch_size * actor_rollout_ref.rollout.n = {train_bs} * {n} = {train_bs * n} sequences "
            f"per step do not split evenly over world size {world_expr} = {world} "
            f"({train_bs * n} % {world} = {(train_bs * n) % world})"
        )
    # with Ulysses sequence parallelism a group of sp ranks shares its rows: mini-batches split over world / sp
    actor_sp = sp_size(actor)
    _check_mini_micro(
        errors,
        "actor_rollout_ref.actor",
        actor.ppo_mini_batch_size,
        actor.ppo_micro_batch_size_per_gpu,
        actor.use_dynamic_bsz,
        train_bs,
        n,
        world // actor_sp,
        world_expr if actor_sp == 1 else f"({world_expr}) / ulysses_sequence_parallel_size {actor_sp}",
    )
    if not use_critic:
        return
    critic = cfg.critic
    if critic.rollout_n != n:
        errors.append(
            f"critic.rollout_n={critic.rollout_n} differs from actor_rollout_ref.rollout.n={n}; the critic "
            f"counts the same sequences as the actor (leave critic.rollout_n at its default, which follows n)"
        )
    critic_sp = sp_size(critic)
    _check_mini_micro(
        errors,
        "critic",
        critic.ppo_mini_batch_size,
        critic.ppo_micro_batch_size_per_gpu,
        critic.use_dynamic_bsz,
        train_bs,
        n,
        world // critic_sp,
        world_expr if critic_sp == 1 else f"({world_expr}) / ulysses_sequence_parallel_size {critic_sp}",
    )


def check_token_budgets(cfg: DictConfig, use_critic: bool, errors: list[str]) -> None:
    """With dynamic batching, every token budget per GPU holds at least one full sequence (prompt + response)."""
    data, actor = cfg.data, cfg.actor_rollout_ref.actor
    seq_len = data.max_prompt_length + data.max_response_length
    budgets = [("actor_rollout_ref.actor", "ppo_max_token_len_per_gpu", "use_dynamic_bsz")]
    budgets += [("actor_rollout_ref.ref", "log_prob_max_token_len_per_gpu", "log_prob_use_dynamic_bsz")]
    budgets += [("actor_rollout_ref.rollout", "log_prob_max_token_len_per_gpu", "log_prob_use_dynamic_bsz")]
    if use_critic:
        budgets += [("critic", "ppo_max_token_len_per_gpu", "use_dynamic_bsz")]
    for prefix, budget_key, flag_key in budgets:
        section = OmegaConf.select(cfg, prefix)
        # with Ulysses a rank holds 1 / sp of each sequence: the group's budget is sp times the per-GPU one
        sp = sp_size(actor if prefix == "actor_rollout_ref.rollout" else section)
        if section[flag_key] and section[budget_key] * sp < seq_len:
            per = f" x ulysses_sequence_parallel_size {sp}" if sp > 1 else ""
            errors.append(
                f"{prefix}.{budget_key}={section[budget_key]}{per} is below one full sequence "
                f"(data.max_prompt_length + data.max_response_length = {data.max_prompt_length} + "
                f"{data.max_response_length} = {seq_len}); with {prefix}.{flag_key}=true every micro-batch must "
                f"hold at least one sequence"
            )


def check_algorithm_settings(cfg: DictConfig, use_critic: bool, errors: list[str]) -> None:
    """Resume path, GAE's critic, the KL controller, the reward model's path, and registered estimator and loss."""
    trainer, algo = cfg.trainer, cfg.algorithm
    if trainer.resume_mode == "resume_path" and not trainer.resume_from_path:
        errors.append(
            "trainer.resume_mode=resume_path needs trainer.resume_from_path (a global_step_* checkpoint directory)"
        )
    if algo.adv_estimator == "gae" and not use_critic:
        errors.append(
            "algorithm.adv_estimator=gae needs a critic (value function) but critic.enable=false; "
            "set critic.enable=true (or null), or pick a critic-free estimator such as grpo"
        )
    kl_ctrl = algo.kl_ctrl
    kl_cap = kl_ctrl.get("kl_coef_max")
    if kl_cap is not None and float(kl_cap) <= 0:
        errors.append(f"algorithm.kl_ctrl.kl_coef_max={kl_cap} must be > 0 (or null for no cap)")
    elif kl_cap is not None and float(kl_ctrl.kl_coef) > float(kl_cap):
        errors.append(
            f"algorithm.kl_ctrl.kl_coef={kl_ctrl.kl_coef} is above algorithm.kl_ctrl.kl_coef_max={kl_cap}: the "
            "cap must be at least the initial coefficient"
        )
    if kl_ctrl.type == "adaptive" and (float(kl_ctrl.target_kl) <= 0 or int(kl_ctrl.horizon) <= 0):
        errors.append(
            f"algorithm.kl_ctrl.type=adaptive needs target_kl > 0 and horizon > 0, got target_kl={kl_ctrl.target_kl}, "
            f"horizon={kl_ctrl.horizon}"
        )
    if cfg.reward_model.enable and not cfg.reward_model.model.path:
        errors.append("reward_model.enable=true needs reward_model.model.path (a sequence-classification model)")
    _check_registered(
        algo.adv_estimator, "algorithm.adv_estimator", "verl.trainer.ppo.core_algos", "ADV_ESTIMATOR_REGISTRY", errors
    )
    _check_registered(
        cfg.actor_rollout_ref.actor.policy_loss.loss_mode,
        "actor_rollout_ref.actor.policy_loss.loss_mode",
        "verl.trainer.ppo.core_algos",
        "POLICY_LOSS_REGISTRY",
        errors,
    )


def check_logger(cfg: DictConfig, errors: list[str]) -> None:
    """``trainer.logger`` names only known backends (else the run would stop when its tracker starts)."""
    from verl.reporting.backends import BACKENDS

    for name in cfg.trainer.logger or []:
        if str(name) not in BACKENDS:
            text = str(name)
            if text.startswith("[") and text.endswith("]"):
                # a list that reached us as one string: quotes around it (trainer.logger='[console,wandb]', or
                # quotes nested in a shell variable) make Hydra's grammar read a string
                listed = text[1:-1].replace('"', "").replace("'", "").replace(" ", "")
                errors.append(
                    f"trainer.logger: {text!r} is one string that looks like a list (quotes around the brackets); "
                    f"write trainer.logger=[{listed}] without them"
                )
                continue
            close = difflib.get_close_matches(text, list(BACKENDS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            errors.append(f"trainer.logger: unknown backend {name!r}; supported: {', '.join(BACKENDS)}{hint}")


def wasted_work_warnings(cfg: DictConfig, use_critic: bool) -> list[str]:
    """Settings that run but waste the step: KL penalised twice, group estimators with one response per group, a
    critic trained for an estimator that does not read values. None in a validation-only run
    (``trainer.val_only``): nothing is trained there, so nothing is wasted."""
    algo, n = cfg.algorithm, cfg.actor_rollout_ref.rollout.n
    warns: list[str] = []
    if cfg.trainer.val_only:
        return warns
    if algo.use_kl_in_reward and cfg.actor_rollout_ref.actor.use_kl_loss:
        warns.append(
            "algorithm.use_kl_in_reward=true and actor_rollout_ref.actor.use_kl_loss=true: the KL to the reference "
            "policy is penalised twice (in the reward and in the actor loss); usually only one is wanted"
        )
    if algo.adv_estimator in ("grpo", "rloo", "grpo_passk") and n == 1:
        warns.append(
            f"algorithm.adv_estimator={algo.adv_estimator} with actor_rollout_ref.rollout.n=1: every group holds "
            f"a single response, so every advantage is 0 and the policy does not learn; use rollout.n >= 2"
        )
    if use_critic and cfg.critic.enable and algo.adv_estimator != "gae":
        warns.append(
            f"critic.enable=true but algorithm.adv_estimator={algo.adv_estimator} does not use values: the critic "
            f"is trained for nothing"
        )
    return warns


def check_ppo_config(cfg: DictConfig) -> tuple[list[str], list[str]]:
    """All cross-field checks of a (type-checked) PPO config; returns ``(errors, warnings)``.

    Each check is a function of its own: the namespace, positive sizes, what is implemented, multi-turn settings,
    placement, value ranges, the hf decode loop, logger names, rollout correction, asynchronous training,
    distillation and the judge;
    then batch division over the ranks, token budgets and the algorithm's settings (their arithmetic divides by the
    sizes above: after a problem there, only what they find about other keys is added). Every problem is reported
    at once. Warnings: :func:`wasted_work_warnings`.
    """
    errors: list[str] = []
    warns: list[str] = []
    use_critic = critic_enabled(cfg)
    run_check(check_namespace, cfg, errors)
    run_check(check_positive_sizes, cfg, use_critic, errors)
    run_check(check_section_rules, cfg, use_critic, errors)
    run_check(check_implemented, cfg, errors, warns)
    run_check(check_multi_turn, cfg, errors, warns)
    run_check(check_placement, cfg, errors)
    run_check(check_value_ranges, cfg, use_critic, errors)
    run_check(check_hf_decode, cfg, errors)
    run_check(check_logger, cfg, errors)
    run_check(algo_checks.check_rollout_correction, cfg, errors)
    run_check(algo_checks.check_algorithm_keys, cfg, errors)
    run_check(algo_checks.check_dynamic_sampling, cfg, errors)
    run_check(algo_checks.check_regression_losses, cfg, errors)
    run_check(algo_checks.check_flowrl, cfg, errors)
    run_check(check_spo, cfg, errors, warns)
    run_check(algo_checks.check_ref_update, cfg, need_reference_policy(cfg), errors)
    run_check(check_async_training, cfg, errors)
    run_check(check_sync_partial_rollout, cfg, errors, warns)
    run_check(check_distillation_and_judge, cfg, errors)
    if errors:
        # the arithmetic below divides by the sizes checked above: it runs anyway (every mistake at once), and
        # what it says about a key already reported, or a crash on a bad value, is left out
        later: list[str] = []
        for check in (check_batch_division, check_token_budgets, check_algorithm_settings):
            try:
                check(cfg, use_critic, later)
            except (ArithmeticError, TypeError, ValueError, AttributeError, KeyError):
                pass
        errors.extend(independent_problems(errors, later))
        return errors, warns
    check_batch_division(cfg, use_critic, errors)
    check_token_budgets(cfg, use_critic, errors)
    check_algorithm_settings(cfg, use_critic, errors)
    warns.extend(wasted_work_warnings(cfg, use_critic))
    return errors, warns
