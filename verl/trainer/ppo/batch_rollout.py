"""One batch through the rollout: prepare the prompts, generate, score, decode. The one home of this idiom.

Every caller that turns prompts into scored responses goes through these functions: the driver's training step
and validation (:class:`~verl.trainer.ppo.ray_trainer.RayPPOTrainer`), the Python API's ``RolloutManager`` and
evaluators, and ``main_eval``'s generation mode. What differs between them is passed in: the ``generate`` callable
(the actor group through :func:`generate_on_group`, the driver's seeded :meth:`RayPPOTrainer.generate`, or an
engine's own ``generate_sequences``), the sampling meta (greedy validation, sampled training), the reward function.

The layouts (``docs/design.md``): a prompt batch holds ``input_ids``, ``attention_mask`` [, ``position_ids``]
``[bs, prompt_len]`` and per-prompt non-tensor columns (``data_source``, ``reward_model``, ...). A rollout batch holds
``bs * n`` rows, each prompt's ``n`` responses next to each other (interleaved repeat), sharing the prompt's group
id ``uid``: ``prompts [bs*n, prompt_len]``, ``responses``/``response_mask [bs*n, response_len]``, the full
``input_ids``/``attention_mask``/``position_ids [bs*n, prompt_len + response_len]``, and the prompt's columns.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto, pad_dataproto_to_divisor, unpad_dataproto
from verl.protocol.rollout_text import response_texts, rollout_texts
from verl.sections.rollout import agent_loops_on
from verl.trainer.ppo.sessions import expand_to_outputs

__all__ = [
    "AGENT_KEYS",
    "GEN_KEYS",
    "MULTI_MODAL_KEYS",
    "add_agent_reward",
    "attach_scores",
    "decode_generations",
    "decode_responses",
    "generate_groups",
    "generate_on_group",
    "generate_rollouts",
    "make_agent_loop_manager",
    "prompt_meta",
    "score_rollouts",
    "tag_groups",
]

# the prompt tensors a rollout engine reads; everything else stays with the driver and is joined back afterwards
GEN_KEYS = ("input_ids", "attention_mask", "position_ids")
# the prompt columns agent loops read (multi-turn rollouts), sent to the engine too where the batch has them
AGENT_KEYS = ("raw_prompt", "extra_info", "agent_name", "index")
# a vision-language prompt's images (the processor's inputs for the hf engine, the raw images and the prompt ids
# with one placeholder per image for vLLM), sent to the engine where the batch has them
MULTI_MODAL_KEYS = ("multi_modal_inputs", "multi_modal_data", "raw_prompt_ids")

Generate = Callable[[DataProto], DataProto]


def prompt_meta(tokenizer: Any, global_steps: int = 0) -> dict[str, Any]:
    """The meta every generation call carries: the tokenizer's stop and pad ids and the current step."""
    return {
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "global_steps": int(global_steps),
    }


def tag_groups(batch: DataProto) -> DataProto:
    """Give every prompt a group id ``uid`` (a UUID string) unless it has one; the ``n`` responses of a prompt share
    it (GRPO/RLOO group statistics, ``val-core`` best/maj@N). Returns ``batch`` (tagged in place)."""
    if "uid" not in batch.non_tensor_batch:
        batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
    return batch


def generate_on_group(group: Any, gen_batch: DataProto) -> DataProto:
    """``group.generate_sequences(gen_batch)`` with the batch padded to a multiple of ``group.world_size`` (a batch
    dispatched over ranks must divide evenly) and the padding rows dropped from the output."""
    padded, pad_size = pad_dataproto_to_divisor(gen_batch, int(getattr(group, "world_size", 1)))
    return unpad_dataproto(group.generate_sequences(padded), pad_size)


def make_agent_loop_manager(config: Any, tokenizer: Any, group: Any, tools: Sequence[Any] = ()) -> Any:
    """The driver's :class:`~verl.experimental.agent_loop.manager.AgentLoopManager` over ``group`` (the actor
    worker group, one actor worker or an engine) when rollouts go through agent loops (``rollout.multi_turn.enable``
    or ``rollout.mode=async``: :func:`~verl.sections.rollout.agent_loops_on`; not with synchronous partial rollouts),
    else None. ``config`` is the run's whole config; ``tools`` the Python API's own ``BaseTool`` objects."""
    from verl.trainer.config.partial_rollout_checks import sync_partial_rollout

    if not agent_loops_on(config.actor_rollout_ref.rollout) or sync_partial_rollout(config):
        return None  # partial rollouts generate single turns plainly (the config refuses other agent loops)
    from verl.experimental.agent_loop.manager import AgentLoopManager

    return AgentLoopManager.from_config(config, tokenizer, group, tools=list(tools))


def generate_rollouts(group: Any, agent_loops: Any, gen_batch: DataProto) -> DataProto:
    """Generate ``gen_batch``: through the agent loops (``agent_loops``, an ``AgentLoopManager``, when
    ``rollout.multi_turn.enable`` or ``rollout.mode=async``) over ``group``'s engines, else plainly by ``group``
    (:func:`generate_on_group`)."""
    if agent_loops is not None:
        return agent_loops.generate_sequences(gen_batch)
    return generate_on_group(group, gen_batch)


def generate_groups(
    prompts: DataProto,
    n: int,
    generate: Generate,
    meta: dict[str, Any] | None = None,
    columns: Sequence[str] = (),
) -> DataProto:
    """Prompts ``[bs, prompt_len]`` -> ``bs * n`` rollouts: each prompt repeated ``n`` times in a row, generated by
    ``generate``, joined with the prompt's other columns (see the module docstring for the layout). Agent loops
    that give a trajectory several rows (``session_id`` column) give more: each row joined with its prompt's.

    ``meta`` is the generation call's ``meta_info`` (``eos_token_id``, ``do_sample``, ``validate``,
    ``temperature``, ...). Prompts without a ``uid`` get new ones (call :func:`tag_groups` first for two
    generations of one group, e.g. ReMax's greedy baseline); the caller's ``prompts`` are left as they were.
    ``columns``: more prompt columns the engine reads (``reward_model`` for a judge that scores agent-loop
    trajectories during the rollout, :func:`verl.experimental.agent_loop.judge_overlap.judge_overlap_config`).
    """
    if prompts.batch is None:
        raise ValueError(f"generate_groups: the prompt batch has no tensors; expected {list(GEN_KEYS)}")
    prompts = tag_groups(DataProto(prompts.batch, dict(prompts.non_tensor_batch), dict(prompts.meta_info)))
    gen_keys = [k for k in GEN_KEYS if k in prompts.batch.keys()]
    agent_keys = [k for k in (*AGENT_KEYS, *columns) if k in prompts.non_tensor_batch]
    if "multi_modal_data" in prompts.non_tensor_batch:
        agent_keys += [k for k in MULTI_MODAL_KEYS if k in prompts.non_tensor_batch]
    gen_batch = prompts.select(batch_keys=gen_keys, non_tensor_batch_keys=agent_keys, meta_info_keys=[])
    rest = prompts.select(batch_keys=[k for k in prompts.batch.keys() if k not in gen_keys])
    gen_batch.meta_info.update(meta or {})
    output = generate(gen_batch.repeat(repeat_times=n, interleave=True))
    for key in agent_keys:  # the prompt's own columns come back from ``rest``
        output.non_tensor_batch.pop(key, None)
    # an agent loop may give a trajectory several rows (verl.trainer.ppo.sessions): each copies its prompt's columns
    return expand_to_outputs(rest.repeat(repeat_times=n, interleave=True), output).union(output)


def score_rollouts(
    rollouts: DataProto, reward_fn: Callable[..., Any] | None, reward_model: Any = None
) -> tuple[DataProto, torch.Tensor, dict[str, list]]:
    """Score a rollout batch: the reward model group's ``rm_scores`` first (when ``reward_model`` is given and the
    batch has none yet), then the reward function (a reward manager, ``verl.trainer.ppo.reward.compute_reward``).

    Returns ``(rollouts, token_level_scores [bs, response_len], extra)``: the batch (with ``rm_scores`` joined when
    the reward model ran), the scores, and the reward function's per-sample extras (``{"acc": [...], ...}``) and
    batch counters (``reward/...``). Without a reward function the reward model's scores are the scores.
    """
    from verl.trainer.ppo.reward import compute_reward

    if reward_model is not None and "rm_scores" not in rollouts.batch.keys():
        rollouts = rollouts.union(reward_model.compute_rm_score(rollouts))
    if reward_fn is None:
        if "rm_scores" in rollouts.batch.keys():
            return rollouts, rollouts.batch["rm_scores"], {}
        raise ValueError("no reward function and no reward model: set custom_reward_function or reward_model")
    scores, extra = compute_reward(rollouts, reward_fn)
    return rollouts, add_agent_reward(rollouts, scores), extra


def add_agent_reward(rollouts: DataProto, scores: torch.Tensor) -> torch.Tensor:
    """``scores [bs, response_len]`` plus the reward agent loops earned in the episode (``agent_reward``: tool
    rewards and interaction scores), added at each response's last token (the last one ``attention_mask``
    covers, where reward managers put the outcome score). Without that column ``scores`` is returned as is."""
    if "agent_reward" not in rollouts.non_tensor_batch:
        return scores
    bonus = torch.tensor([float(x) for x in rollouts.non_tensor_batch["agent_reward"]], dtype=scores.dtype)
    response_len = rollouts.batch["responses"].shape[-1]
    valid = rollouts.batch["attention_mask"][:, -response_len:].sum(-1).clamp(min=1) - 1
    scores = scores.clone()
    scores[torch.arange(len(bonus)), valid.to(scores.device)] += bonus.to(scores.device)
    return scores


def attach_scores(
    batch: DataProto, scores: torch.Tensor, extra: dict[str, list], metrics: dict[str, Any] | None = None
) -> DataProto:
    """Store ``token_level_scores [bs, response_len]``. Per-sample extras become non-tensor columns, their names
    listed in ``meta_info["reward_extra_keys"]`` (for the ``reward_extra/*`` metrics); batch counters (keys
    ``reward/...``) are summed into ``metrics``. Returns ``batch`` (changed in place)."""
    batch.batch["token_level_scores"] = scores
    extra_keys = list(batch.meta_info.get("reward_extra_keys", []))
    for key, values in extra.items():
        if key.startswith("reward/"):
            if metrics is not None:
                metrics[key] = float(np.sum(values))
        elif len(values) == len(batch):
            batch.non_tensor_batch[key] = np.asarray(values, dtype=object)
            extra_keys += [] if key in extra_keys else [key]
    batch.meta_info["reward_extra_keys"] = extra_keys
    return batch


def decode_responses(tokenizer: Any, rollouts: DataProto) -> list[str]:
    """The response texts of a rollout batch as a reward sees them (:func:`verl.protocol.rollout_text.rollout_texts`:
    in multi-turn rollouts the whole conversation after the prompt, tool and user turns included)."""
    return response_texts(tokenizer, rollouts)


def decode_generations(tokenizer: Any, rollouts: DataProto) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """Decoded prompts, decoded valid responses and (where the batch has a ``reward_model`` column) the ground
    truths of a rollout batch: what the rollout dumps, the report's samples and the logged generations show."""
    prompts, responses = rollout_texts(tokenizer, rollouts)
    extra: dict[str, list[str]] = {}
    if "reward_model" in rollouts.non_tensor_batch:
        extra["ground_truth"] = [str(x.get("ground_truth")) for x in rollouts.non_tensor_batch["reward_model"]]
    return prompts, responses, extra
