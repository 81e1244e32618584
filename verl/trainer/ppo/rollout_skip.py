"""Dump a step's rollouts to disk and replay them instead of generating (upstream verl v0.9's ``skip.rollout`` /
``skip.rollout_tq``, ``verl/utils/skip``, docs/advance/skip_manager.rst).

On-disk layout, upstream's: ``{dump_dir}/{experiment_name}_{project_name}/GBS{train_batch_size}_N{rollout.n}_in
{max_prompt_length}_out{max_response_length}/{step}/`` holding ``gen_batch.dp`` (the generation output, a
:meth:`DataProto.save_to_disk` file) and ``meta.json``. On a step listed in ``steps``:

* ``action=cache``: that step's dump when it exists, else generate and dump;
* ``action=repeat``: the step's dump, else the largest dumped step below it, else the smallest above it; none:
  generate and dump.

Steps not listed always generate. A replayed batch is exactly what was dumped (prompts, responses, log-probs,
``uid``s); the rest of the step (scores, advantages, update) runs on it as usual.

``skip.async_rollout`` (the asynchronous trainers): the "step" is the feed index of a prompt batch, 1 for the first
batch this run gives the rollouter; a replayed batch is never sent to the rollouter and counts as generated with the
trainer's current weights (``rollout_weight_version``), as upstream restamps replayed samples.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from omegaconf import DictConfig

from verl.protocol import DataProto

__all__ = ["RolloutSkip"]

BATCH_FILE = "gen_batch.dp"
META_FILE = "meta.json"


class RolloutSkip:
    """Replay / dump of generation output for the steps of ``skip.rollout`` (or ``skip.rollout_tq``)."""

    def __init__(self, config: DictConfig, role: str) -> None:
        section = config.skip[role]
        self.role = role
        self.steps = {int(s) for s in section.steps}
        self.action = str(section.action)
        trainer, data = config.trainer, config.data
        run = f"{trainer.experiment_name}_{trainer.project_name}"
        shape = (
            f"GBS{int(data.train_batch_size)}_N{int(config.actor_rollout_ref.rollout.n)}_in{int(data.max_prompt_length)}"
            f"_out{int(data.max_response_length)}"
        )
        self.root = os.path.join(os.path.expanduser(str(section.dump_dir)), run, shape)

    @classmethod
    def from_config(cls, config: Any, roles: tuple[str, ...] = ("rollout", "rollout_tq")) -> RolloutSkip | None:
        """The first enabled role of ``roles`` in ``config.skip`` (the synchronous trainer's ``rollout`` /
        ``rollout_tq``; the asynchronous trainer's ``async_rollout``), or None when none is."""
        skip = config.get("skip") if isinstance(config, DictConfig) else None
        if skip is None:
            return None
        for role in roles:
            if skip[role].enable:
                return cls(config, role)
        return None

    def step_dir(self, step: int) -> str:
        return os.path.join(self.root, str(step))

    def _valid(self, step: int) -> bool:
        d = self.step_dir(step)
        return os.path.isfile(os.path.join(d, BATCH_FILE)) and os.path.isfile(os.path.join(d, META_FILE))

    def dumped_steps(self) -> list[int]:
        """The steps with a complete dump under :attr:`root`, ascending."""
        if not os.path.isdir(self.root):
            return []
        return sorted(int(n) for n in os.listdir(self.root) if n.isdigit() and self._valid(int(n)))

    def source_step(self, step: int) -> int | None:
        """The dumped step that ``step`` replays (module docstring), or None: generate (and dump)."""
        if step not in self.steps:
            return None
        if self._valid(step):
            return step
        if self.action != "repeat":
            return None
        dumped = self.dumped_steps()
        below = [s for s in dumped if s < step]
        if below:
            return below[-1]
        above = [s for s in dumped if s > step]
        return above[0] if above else None

    def load(self, step: int) -> DataProto | None:
        """The replayed generation output of ``step`` (``meta_info["skip_replayed_step"]`` names the dump), or
        None when the step generates."""
        source = self.source_step(step)
        if source is None:
            return None
        batch = DataProto.load_from_disk(os.path.join(self.step_dir(source), BATCH_FILE))
        batch.meta_info["skip_replayed_step"] = source
        return batch

    def dump(self, step: int, rollouts: DataProto) -> None:
        """Write ``rollouts`` as ``step``'s dump when the step is listed and has none yet."""
        if step not in self.steps or self._valid(step):
            return
        d = self.step_dir(step)
        os.makedirs(d, exist_ok=True)
        rollouts.save_to_disk(os.path.join(d, BATCH_FILE))
        meta = {"step": step, "role": self.role, "rows": len(rollouts), "time": time.time()}
        with open(os.path.join(d, META_FILE), "w", encoding="utf-8") as f:
            json.dump(meta, f)
