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

from omegaconf import DictConfig


def critic_enabled(cfg: DictConfig) -> bool:
    """Whether a critic is trained: ``critic.enable`` when set, else ``algorithm.adv_estimator == "gae"``."""
    enable = cfg.critic.get("enable")
    if enable is None:
        return str(cfg.algorithm.adv_estimator) == "gae"
    return bool(enable)


def need_reference_policy(cfg: DictConfig) -> bool:
    """Whether the reference policy is needed: a KL term in the reward or in the actor loss."""
    return bool(cfg.algorithm.use_kl_in_reward) or bool(cfg.actor_rollout_ref.actor.use_kl_loss)


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
        value = _get(cfg, path)
        if value is not None and value < minimum:
            errors.append(f"{path}: must be >= {minimum}, got {value}")


def _get(cfg: DictConfig, path: str) -> Any:
    node: Any = cfg
    for part in path.split("."):
        node = node[part]
    return node


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


def _divisors(n: int, limit: int = 12) -> list[str]:
    """The divisors of ``n`` (the valid micro-batch sizes), at most ``limit`` of them shown."""
    divs = [str(d) for d in range(1, n + 1) if n % d == 0]
    return divs if len(divs) <= limit else [*divs[: limit - 1], "...", divs[-1]]


def check_ppo_config(cfg: DictConfig) -> tuple[list[str], list[str]]:
    """All cross-field checks of a (type-checked) PPO config; returns ``(errors, warnings)``.

    Errors: non-positive sizes; ``train_batch_size * rollout.n`` not divisible by the world size; the actor (and,
    when enabled, critic) mini-batch larger than or not dividing ``train_batch_size``; the per-rank mini-batch
    ``mini * n / W`` not divisible by the micro-batch (unless ``use_dynamic_bsz``); a dynamic-batch token budget
    below one full sequence; ``resume_mode=resume_path`` without ``resume_from_path``; ``gae`` with the critic
    disabled; a reward model enabled without a path; an unregistered ``adv_estimator`` / ``policy_loss.loss_mode``.
    Warnings: KL both in the reward and in the loss; GRPO-style estimators with ``rollout.n == 1``.
    """
    errors: list[str] = []
    warns: list[str] = []
    data, arr, trainer, algo = cfg.data, cfg.actor_rollout_ref, cfg.trainer, cfg.algorithm
    actor, rollout = arr.actor, arr.rollout
    if trainer.get("namespace") is not None:
        from verl.utils.fs import validate_namespace

        try:
            validate_namespace(trainer.namespace)
        except ValueError as err:
            errors.append(f"trainer.namespace: {err}")

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
    _check_positive(cfg, ["actor_rollout_ref.model.lora_rank", "trainer.critic_warmup"], errors, minimum=0)
    use_critic = critic_enabled(cfg)
    if use_critic:
        _check_positive(
            cfg,
            ["critic.ppo_mini_batch_size", "critic.ppo_micro_batch_size_per_gpu", "critic.ppo_epochs"],
            errors,
        )
    if errors:  # the arithmetic below divides by these
        return errors, warns

    world = trainer.nnodes * trainer.n_gpus_per_node
    world_expr = f"trainer.nnodes * trainer.n_gpus_per_node = {trainer.nnodes} * {trainer.n_gpus_per_node}"
    train_bs, n = data.train_batch_size, rollout.n
    if (train_bs * n) % world != 0:
        errors.append(
            f"data.train_batch_size * actor_rollout_ref.rollout.n = {train_bs} * {n} = {train_bs * n} sequences "
            f"per step do not split evenly over world size {world_expr} = {world} "
            f"({train_bs * n} % {world} = {(train_bs * n) % world})"
        )
    _check_mini_micro(
        errors,
        "actor_rollout_ref.actor",
        actor.ppo_mini_batch_size,
        actor.ppo_micro_batch_size_per_gpu,
        actor.use_dynamic_bsz,
        train_bs,
        n,
        world,
        world_expr,
    )
    if use_critic:
        critic = cfg.critic
        if critic.rollout_n != n:
            errors.append(
                f"critic.rollout_n={critic.rollout_n} differs from actor_rollout_ref.rollout.n={n}; the critic "
                f"counts the same sequences as the actor (leave critic.rollout_n at its default, which follows n)"
            )
        _check_mini_micro(
            errors,
            "critic",
            critic.ppo_mini_batch_size,
            critic.ppo_micro_batch_size_per_gpu,
            critic.use_dynamic_bsz,
            train_bs,
            n,
            world,
            world_expr,
        )

    seq_len = data.max_prompt_length + data.max_response_length
    budgets = [("actor_rollout_ref.actor", "ppo_max_token_len_per_gpu", "use_dynamic_bsz")]
    budgets += [("actor_rollout_ref.ref", "log_prob_max_token_len_per_gpu", "log_prob_use_dynamic_bsz")]
    budgets += [("actor_rollout_ref.rollout", "log_prob_max_token_len_per_gpu", "log_prob_use_dynamic_bsz")]
    if use_critic:
        budgets += [("critic", "ppo_max_token_len_per_gpu", "use_dynamic_bsz")]
    for prefix, budget_key, flag_key in budgets:
        section = _get(cfg, prefix)
        if section[flag_key] and section[budget_key] < seq_len:
            errors.append(
                f"{prefix}.{budget_key}={section[budget_key]} is below one full sequence "
                f"(data.max_prompt_length + data.max_response_length = {data.max_prompt_length} + "
                f"{data.max_response_length} = {seq_len}); with {prefix}.{flag_key}=true every micro-batch must "
                f"hold at least one sequence"
            )

    if trainer.resume_mode == "resume_path" and not trainer.resume_from_path:
        errors.append(
            "trainer.resume_mode=resume_path needs trainer.resume_from_path (a global_step_* checkpoint directory)"
        )
    if algo.adv_estimator == "gae" and not use_critic:
        errors.append(
            "algorithm.adv_estimator=gae needs a critic (value function) but critic.enable=false; "
            "set critic.enable=true (or null), or pick a critic-free estimator such as grpo"
        )
    if cfg.reward_model.enable and not cfg.reward_model.model.path:
        errors.append("reward_model.enable=true needs reward_model.model.path (a sequence-classification model)")

    _check_registered(
        algo.adv_estimator, "algorithm.adv_estimator", "verl.trainer.ppo.core_algos", "ADV_ESTIMATOR_REGISTRY", errors
    )
    _check_registered(
        actor.policy_loss.loss_mode,
        "actor_rollout_ref.actor.policy_loss.loss_mode",
        "verl.trainer.ppo.core_algos",
        "POLICY_LOSS_REGISTRY",
        errors,
    )

    if algo.use_kl_in_reward and actor.use_kl_loss:
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
    return errors, warns
