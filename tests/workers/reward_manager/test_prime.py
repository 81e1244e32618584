"""The ``prime`` reward manager: verl's constructor, positional scorer calls in worker processes, a per-call time
limit, failures scored 0, tuple results scored by their first element, ``data.batch["acc"]``."""

from __future__ import annotations

import sys
import time

import cloudpickle
import numpy as np
import pytest
import torch

from verl import DataProto
from verl.workers.reward_manager import PrimeRewardManager, get_reward_manager_cls
from verl.workers.reward_manager.prime import prime_score

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def verify(task, completion, reference, extra):  # verl's PRIME scorers take these four by position
    if completion.startswith("B"):
        raise RuntimeError("cannot parse")
    if completion.startswith("S"):
        time.sleep(30)
    return completion == reference, {"task": task}


class _CharTokenizer:
    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids if i > 0)


def _batch(responses: list[str], truth: str) -> DataProto:
    width = max(len(r) for r in responses)
    resp = torch.tensor([[ord(c) for c in r] + [0] * (width - len(r)) for r in responses])
    mask = (resp > 0).long()
    n = len(responses)
    return DataProto.from_dict(
        tensors={
            "prompts": torch.full((n, 2), 72),
            "responses": resp,
            "response_mask": mask,
            "attention_mask": torch.cat([torch.ones(n, 2, dtype=torch.long), mask], -1),
        },
        non_tensors={"data_source": ["math"] * n, "reward_model": np.array([{"ground_truth": truth}] * n)},
    )


def test_prime_scores_in_parallel_with_timeouts_and_failures_as_zero() -> None:
    assert get_reward_manager_cls("prime") is PrimeRewardManager
    manager = PrimeRewardManager(_CharTokenizer(), 0, compute_score=verify, num_processes=2, timeout_s=1.0)
    try:
        data = _batch(["42", "B", "S", "41"], "42")
        out = manager(data, return_dict=True)
        # the score sits on the last valid response token ("42": position 1; "B", "S": position 0)
        assert out["reward_tensor"].tolist() == [[0.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
        assert data.batch["acc"].dtype == torch.float32 and data.batch["acc"].tolist() == [1.0, 0.0, 0.0, 0.0]
        assert out["reward_extra_info"]["reward_error"] == [0, 1, 1, 0]
        assert manager.verify(_batch(["42"], "42")) == [1.0]
    finally:
        manager.close()


def test_prime_result_conversion_and_bad_arguments() -> None:
    assert prime_score(None) == 0.0 and prime_score(True) == 1.0 and prime_score((False, "x")) == 0.0
    assert prime_score({"score": 0.5}) == {"score": 0.5}
    with pytest.raises(ValueError, match="num_processes must be an int >= 1"):
        PrimeRewardManager(_CharTokenizer(), 0, compute_score=verify, num_processes=0)
    with pytest.raises(TypeError, match="num_processes"):
        PrimeRewardManager(_CharTokenizer(), 0, compute_score=verify, bogus=1)
