"""The ``gdpo`` reward manager (upstream v0.9's ``reward.reward_manager.name=gdpo``, the manager of
``examples/gdpo_trainer``): naive per-sample scoring whose reward function also finds the run's
``trainer.experiment_name`` in ``extra_info["experiment_name"]``.

Upstream's GDPO scorer (``verl/utils/reward_score/rlla.py``) picks the chat format to strip by that name and returns
a dict of components (``accuracy_reward``, ``format_reward``, ``score``). Every manager stores such dict entries per
response, which is where ``algorithm.adv_estimator=gdpo`` reads ``algorithm.gdpo_reward_keys``
(:mod:`verl.algorithms.advantage_gdpo`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from verl.workers.reward_manager.abstract import Sample
from verl.workers.reward_manager.naive import NaiveRewardManager
from verl.workers.reward_manager.registry import register


@register("gdpo")
class GDPORewardManager(NaiveRewardManager):
    """:class:`NaiveRewardManager` with ``extra_info["experiment_name"]`` set on every sample.

    Extra arg: ``experiment_name`` (``trainer.experiment_name``; the trainer passes it)."""

    def __init__(self, tokenizer: Any, num_examine: int, *, experiment_name: str, **kwargs: Any) -> None:
        super().__init__(tokenizer, num_examine, **kwargs)
        self.experiment_name = str(experiment_name)

    @classmethod
    def _extra_arg_names(cls) -> str:
        return ", experiment_name"

    def score_samples(self, samples: list[Sample]) -> list[Any]:
        """One result (or the exception raised) per sample, each called with the run's name in ``extra_info``."""
        named = [
            dataclasses.replace(s, extra_info={**(s.extra_info or {}), "experiment_name": self.experiment_name})
            for s in samples
        ]
        return super().score_samples(named)
