"""The recipe's dataset class, selected with ``data.custom_cls.path=<this file> data.custom_cls.name=...``."""

from __future__ import annotations

from typing import Any

from verl.data.rl_dataset import RLHFDataset


class DifficultyTaggedDataset(RLHFDataset):
    """``RLHFDataset`` whose rows also carry ``extra_info["difficulty"]``: the number of digits of the ground truth
    (the reward manager pays a bonus for hard prompts)."""

    def __getitem__(self, item: int) -> dict[str, Any]:
        row = super().__getitem__(item)
        reward_model = row.get("reward_model") or {}
        answer = str(reward_model.get("ground_truth", "")).strip().lstrip("-")
        row["extra_info"] = {**(row.get("extra_info") or {}), "difficulty": len(answer)}
        return row
