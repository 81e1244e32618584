"""``ReplayBuffer``: a dataflow stage that keeps scored rollouts and serves mini-batches of them for several updates.

``actor.sample() >> reward.score() >> ReplayBuffer(capacity=64, max_age=2, updates_per_step=2) >> ppo.update()``:
each run adds the freshly scored rollouts, then serves ``updates_per_step`` mini-batches of ``batch_size`` prompt
groups drawn from everything still in the buffer; the update stage trains on each (one training step each).

Limits:

* **size**: at most ``capacity`` sequences; the oldest groups go first.
* **off-policy age**: a group generated when the actor had made ``v`` updates has age ``global_steps - v``; groups
  older than ``max_age`` updates are dropped before serving (``max_age=0``: fresh rollouts only).

A group (the ``rollout.n`` responses to one prompt, one ``uid``) is kept and served whole, so group-relative
estimators (GRPO, RLOO) see complete groups. The update recomputes the old log-probs under the current actor (as
every PPO step does), so the clipped ratio keeps each update within the trust region of the current policy;
``max_age`` bounds how stale the samples behind that ratio may be. Prompts of different batches have different
padded widths: served mini-batches are left-padded to a common prompt width (pad token, mask 0, position 0).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from verl.api.dataflow import MiniBatches, PPOTrainer, Stage
from verl.protocol import DataProto

# tensors that span prompt + response (left-padded with the prompt) and the prompt itself
_PROMPT_SPANNING = ("input_ids", "attention_mask", "position_ids")


@dataclass
class _Group:
    data: DataProto  # the rows of one uid, on CPU
    version: int  # the trainer's global_steps (updates made) when the group was generated


class ReplayBuffer(Stage):
    """Keeps scored rollouts across steps; serves ``updates_per_step`` mini-batches of ``batch_size`` groups.

    Args:
        capacity: most sequences kept (oldest groups evicted first); must hold at least one run's rollouts.
        batch_size: prompt groups per served mini-batch (default ``data.train_batch_size``, the size of an
            on-policy step, so the PPO mini-batch settings apply unchanged).
        max_age: most updates a group may lag behind the actor (``0``: on-policy only).
        updates_per_step: mini-batches served (and updates made) per pipeline run.
        seed: seed of the uniform choice of groups.
    """

    name = "replay"

    def __init__(
        self,
        capacity: int,
        batch_size: int | None = None,
        max_age: int = 1,
        updates_per_step: int = 1,
        seed: int = 0,
    ) -> None:
        for key, value, low in (
            ("capacity", capacity, 1),
            ("max_age", max_age, 0),
            ("updates_per_step", updates_per_step, 1),
        ):
            if int(value) < low:
                raise ValueError(f"ReplayBuffer {key}={value!r} must be >= {low}")
        if batch_size is not None and int(batch_size) < 1:
            raise ValueError(f"ReplayBuffer batch_size={batch_size!r} must be >= 1")
        self.capacity = int(capacity)
        self.batch_size = None if batch_size is None else int(batch_size)
        self.max_age = int(max_age)
        self.updates_per_step = int(updates_per_step)
        self._groups: list[_Group] = []
        self._gen = torch.Generator().manual_seed(int(seed))
        self.served = 0  # mini-batches served so far

    # ------------------------------------------------------------------------------------------------ state
    def __len__(self) -> int:
        """Sequences held."""
        return sum(len(g.data) for g in self._groups)

    @property
    def num_groups(self) -> int:
        """Prompt groups held."""
        return len(self._groups)

    def ages(self, global_steps: int) -> list[int]:
        """Age in updates of every group held, oldest first."""
        return [int(global_steps) - g.version for g in self._groups]

    def clear(self) -> None:
        """Drop every rollout."""
        self._groups = []

    # ------------------------------------------------------------------------------------------------ add / evict
    def add(self, data: DataProto, version: int) -> None:
        """Store the scored rollouts ``data`` (``token_level_scores`` present), generated after ``version``
        updates, split by ``uid``; then evict the oldest groups beyond ``capacity``."""
        if data.batch is None or "token_level_scores" not in data.batch.keys():
            raise ValueError("ReplayBuffer needs scored rollouts (token_level_scores): put a score stage before it")
        if "uid" not in data.non_tensor_batch:
            raise ValueError("ReplayBuffer needs the rollouts' group ids (non-tensor 'uid'), set by the rollout stage")
        if len(data) > self.capacity:
            raise ValueError(
                f"ReplayBuffer capacity={self.capacity} sequences cannot hold one run's {len(data)} rollouts"
            )
        data = data.to("cpu")
        uids = data.non_tensor_batch["uid"]
        order: dict[Any, list[int]] = {}
        for row, uid in enumerate(uids.tolist()):
            order.setdefault(uid, []).append(row)
        for rows in order.values():
            self._groups.append(_Group(data.select_idxs(rows), int(version)))
        while len(self) > self.capacity:
            self._groups.pop(0)

    def evict_stale(self, global_steps: int) -> int:
        """Drop the groups older than ``max_age`` updates; returns how many were dropped."""
        before = len(self._groups)
        self._groups = [g for g in self._groups if int(global_steps) - g.version <= self.max_age]
        return before - len(self._groups)

    # ------------------------------------------------------------------------------------------------ serve
    def sample(self, num_groups: int, global_steps: int, pad_token_id: int) -> DataProto:
        """A mini-batch of ``num_groups`` groups chosen uniformly (without replacement) among those at most
        ``max_age`` updates old, left-padded to one prompt width. Raises when fewer groups are eligible."""
        self.evict_stale(global_steps)
        if num_groups > len(self._groups):
            raise ValueError(
                f"ReplayBuffer has {len(self._groups)} groups within max_age={self.max_age} but a mini-batch needs "
                f"{num_groups} (batch_size): lower batch_size or raise max_age/capacity"
            )
        picked = torch.randperm(len(self._groups), generator=self._gen)[:num_groups].sort().values.tolist()
        chosen = [self._groups[i] for i in picked]
        width = max(g.data.batch["prompts"].shape[1] for g in chosen)
        parts = [_left_pad_prompts(g.data, width, pad_token_id) for g in chosen]
        batch = DataProto.concat(parts, meta_info_conflicts="first")  # groups of different steps
        ages = [int(global_steps) - g.version for g in chosen]
        # per-batch quantities of the generating step are recomputed by the update for this batch
        batch.meta_info.pop("global_token_num", None)
        batch.meta_info["stage_metrics"] = {
            "replay/size": float(len(self)),
            "replay/groups": float(len(self._groups)),
            "replay/age/mean": float(np.mean(ages)),
            "replay/age/max": float(max(ages)),
        }
        self.served += 1
        return batch

    def run(self, trainer: PPOTrainer, data: DataProto) -> MiniBatches:
        self.add(data, version=trainer.driver.global_steps)
        num_groups = self.batch_size or int(trainer.config.data.train_batch_size)
        pad = trainer.tokenizer.pad_token_id
        pad_id = int(pad if pad is not None else trainer.tokenizer.eos_token_id)

        def batches() -> Iterator[DataProto]:
            for _ in range(self.updates_per_step):
                # sampled lazily: ages count the updates the previous mini-batches made
                yield self.sample(num_groups, trainer.driver.global_steps, pad_id)

        return MiniBatches(batches())

    def __repr__(self) -> str:
        return (
            f"ReplayBuffer(capacity={self.capacity}, max_age={self.max_age}, updates_per_step={self.updates_per_step}, "
            f"sequences={len(self)})"
        )


def _left_pad_prompts(data: DataProto, width: int, pad_token_id: int) -> DataProto:
    """``data`` with its prompt part left-padded to ``width`` tokens: ``prompts`` and the prompt+response tensors
    (``input_ids`` with the pad token, ``attention_mask`` / ``position_ids`` with 0); other tensors unchanged."""
    prompt_len = data.batch["prompts"].shape[1]
    extra = width - prompt_len
    if extra == 0:
        return data
    full_len = data.batch["input_ids"].shape[1]
    tensors: dict[str, torch.Tensor] = {}
    for key, value in data.batch.items():
        spans = key == "prompts" or (key in _PROMPT_SPANNING and value.dim() == 2 and value.shape[1] == full_len)
        if spans:
            fill = pad_token_id if key in ("prompts", "input_ids") else 0
            pad = torch.full((value.shape[0], extra), fill, dtype=value.dtype, device=value.device)
            value = torch.cat([pad, value], dim=1)
        tensors[key] = value
    return DataProto.from_dict(tensors=tensors, non_tensors=dict(data.non_tensor_batch), meta_info=dict(data.meta_info))
