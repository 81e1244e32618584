"""The config of synchronous partial rollouts: ``async_training.partial_rollout=true`` without
``async_training.mode`` (verl/trainer/ppo/partial_rollout_pool.py, docs/async_training.md).

Refused in one line each, with what to use instead: an engine that cannot stop a call at a group quota; agent
loops other than single turns without tools (their trajectories are not continued across steps;
``rollout.mode=async`` with ``single_turn_agent``, upstream v0.9's default, generates plainly instead); the stages
that generate again within a step (DAPO's dynamic sampling, ReMax's greedy baseline); replayed rollouts; a step's
prompts that do not split over the ranks. Without rollout importance sampling a warning says that continued
responses mix policies.
"""

from __future__ import annotations

from omegaconf import DictConfig

from verl.sections.rollout import agent_loops_on

__all__ = ["check_sync_partial_rollout", "single_turn_agent_loops", "sync_partial_rollout"]

KEY = "async_training.partial_rollout=true"


def sync_partial_rollout(cfg: DictConfig) -> bool:
    """Whether the run asks for synchronous partial rollouts (``partial_rollout`` without ``async_training.mode``)."""
    at = cfg.get("async_training")
    return at is not None and bool(at.partial_rollout) and at.mode is None


def single_turn_agent_loops(rollout: DictConfig) -> bool:
    """Whether the agent loops of ``rollout`` are single turns without tools (``rollout.mode=async``, upstream v0.9's
    default, with ``single_turn_agent``): the responses of plain generation, which partial rollouts run instead."""
    return not rollout.multi_turn.enable and str(rollout.agent.default_agent_loop) == "single_turn_agent"


def check_sync_partial_rollout(cfg: DictConfig, errors: list[str], warns: list[str]) -> None:
    """The checks of the module docstring; nothing unless synchronous partial rollout is asked for."""
    if not sync_partial_rollout(cfg):
        return
    rollout = cfg.actor_rollout_ref.rollout
    if str(rollout.name) not in ("hf", "vllm", "auto"):
        errors.append(f"{KEY} in synchronous training: actor_rollout_ref.rollout.name={rollout.name} cannot stop a "
                      "call at a group quota; use hf or vllm")  # fmt: skip
    if agent_loops_on(rollout) and not single_turn_agent_loops(rollout):
        errors.append(
            f"{KEY} in synchronous training continues single-turn responses across steps, not agent-loop "
            "trajectories: set actor_rollout_ref.rollout.multi_turn.enable=false and agent.default_agent_loop="
            "single_turn_agent (or use async_training.mode=fully_async)"
        )
    if cfg.algorithm.filter_groups.enable:
        errors.append(f"{KEY}: algorithm.filter_groups (DAPO's dynamic sampling) generates again within a step; "
                      "not supported with partial rollouts")  # fmt: skip
    if str(cfg.algorithm.adv_estimator) == "remax":
        errors.append(f"{KEY}: algorithm.adv_estimator=remax needs a greedy rollout of the step's prompts")
    skip = cfg.get("skip")
    if skip is not None and skip.rollout.enable:
        errors.append(f"{KEY}: skip.rollout replays whole dumped steps; a partial rollout's step continues the "
                      "previous one's responses. Drop one of them")  # fmt: skip
    ranks = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)
    batch = int(cfg.data.train_batch_size)
    if ranks > 0 and batch % ranks:
        errors.append(
            f"{KEY}: data.train_batch_size={batch} prompt groups a step do not split over trainer.nnodes * "
            f"trainer.n_gpus_per_node = {ranks} ranks (each rank completes its share of the groups)"
        )
    rows = 2 * batch * int(rollout.n) // max(ranks, 1)  # the pool's rows on a rank (partial_rollout_pool.POOL_BATCHES)
    if str(rollout.name) in ("hf", "auto") and rows > int(rollout.max_num_seqs):
        warns.append(
            f"{KEY}: a rank's pool holds {rows} rows but the hf engine decodes actor_rollout_ref.rollout.max_num_seqs="
            f"{rollout.max_num_seqs} at a time; rows beyond it start only after those end, then stop at once. Raise "
            f"max_num_seqs to {rows}"
        )
    if cfg.algorithm.rollout_correction.rollout_is is None:
        warns.append(
            f"{KEY}: a response continued across steps was sampled by several policies; "
            "algorithm.rollout_correction.rollout_is=token weighs each token by its own sampler (verl-recipe's "
            "setting)"
        )
