"""The recipe's reward manager, written the way verl's recipes write theirs: its own constructor and ``__call__``
over the batch's items."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import torch

from verl import DataProto
from verl.workers.reward_manager import register
from verl.workers.reward_manager.abstract import AbstractRewardManager


def last_number_matches(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None) -> float:
    """1.0 when the last integer in ``solution_str`` equals ``ground_truth``, else 0.0."""
    numbers = re.findall(r"-?\d+", solution_str)
    return 1.0 if numbers and numbers[-1] == str(ground_truth).strip() else 0.0


@register("recipe_difficulty")
class DifficultyWeightedRewardManager(AbstractRewardManager):
    """Scores each response with ``compute_score`` and adds ``hard_bonus`` to a correct answer of a hard prompt
    (``extra_info["difficulty"] > 1``, set by the recipe's dataset). The score sits on the last response token.

    ``reward_extra_info`` has ``acc`` (the raw score) and ``difficulty`` per sample.
    """

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        compute_score: Any = None,
        reward_fn_key: str = "data_source",
        hard_bonus: float = 0.5,
    ) -> None:
        self.tokenizer = tokenizer
        self.num_examine = num_examine
        self.compute_score = compute_score or last_number_matches
        self.reward_fn_key = reward_fn_key
        self.hard_bonus = float(hard_bonus)

    def __call__(self, data: DataProto, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        """``reward_tensor [bs, response_len]`` (or the dict form with ``reward_extra_info``)."""
        if "rm_scores" in data.batch.keys():
            return (
                {"reward_tensor": data.batch["rm_scores"], "reward_extra_info": {}}
                if return_dict
                else data.batch["rm_scores"]
            )
        reward_tensor = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        extra: dict[str, list[Any]] = defaultdict(list)
        printed: dict[str, int] = defaultdict(int)
        prompt_length = data.batch["prompts"].shape[-1]
        for i in range(len(data)):
            item = data[i]
            valid_len = int(item.batch["attention_mask"][prompt_length:].sum())
            response = self.tokenizer.decode(item.batch["responses"][:valid_len].tolist(), skip_special_tokens=True)
            source = item.non_tensor_batch[self.reward_fn_key]
            ground_truth = item.non_tensor_batch["reward_model"]["ground_truth"]
            extra_info = item.non_tensor_batch.get("extra_info") or {}
            score = float(self.compute_score(source, response, ground_truth, extra_info))
            difficulty = int(extra_info.get("difficulty", 0))
            reward = score + (self.hard_bonus if score > 0 and difficulty > 1 else 0.0)
            reward_tensor[i, max(valid_len - 1, 0)] = reward
            extra["acc"].append(score)
            extra["difficulty"].append(difficulty)
            if printed[source] < self.num_examine:
                printed[source] += 1
                print(f"[response] {response!r} [ground_truth] {ground_truth} [reward] {reward}")
        if return_dict:
            return {"reward_tensor": reward_tensor, "reward_extra_info": dict(extra)}
        return reward_tensor
