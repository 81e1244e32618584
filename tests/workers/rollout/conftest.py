"""Fixtures for the rollout tests: a rollout config section and a builder of left-padded prompt batches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from verl.protocol import DataProto

PAD = 256  # the byte tokenizer's <pad>
EOS = 258  # the byte tokenizer's <eos>


def _rollout_config(**overrides: Any) -> DictConfig:
    base = dict(
        name="hf",
        temperature=1.0,
        top_p=1.0,
        top_k=-1,
        do_sample=True,
        prompt_length=8,
        response_length=6,
        min_new_tokens=0,
        dtype="float32",
        max_num_seqs=256,
        calculate_log_probs=False,
        seed=0,
        val_kwargs=dict(do_sample=False, temperature=0.0, top_p=1.0, top_k=-1, n=1),
    )
    base.update(overrides)
    return OmegaConf.create(base)


@pytest.fixture
def rollout_config() -> Callable[..., DictConfig]:
    """``rollout_config(**overrides)`` -> an ``actor_rollout_ref.rollout`` section for tests (fp32, 6 tokens)."""
    return _rollout_config


def _make_prompts(rows: list[list[int]], prompt_len: int | None = None, **meta: Any) -> DataProto:
    prompt_len = prompt_len or max(len(r) for r in rows)
    ids = torch.full((len(rows), prompt_len), PAD, dtype=torch.long)
    mask = torch.zeros((len(rows), prompt_len), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, prompt_len - len(row) :] = torch.tensor(row)
        mask[i, prompt_len - len(row) :] = 1
    # positions written out by hand: 0 on padding, then 0, 1, 2, ... on the real tokens
    pos = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        pos[i, prompt_len - len(row) :] = torch.arange(len(row))
    meta_info = {"eos_token_id": EOS, "pad_token_id": PAD, **meta}
    uids = [f"uid-{i}" for i in range(len(rows))]
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": pos},
        non_tensors={"uid": uids},
        meta_info=meta_info,
    )


@pytest.fixture
def make_prompts() -> Callable[..., DataProto]:
    """``make_prompts(rows, prompt_len=None, **meta_info)`` -> a left-padded prompt DataProto."""
    return _make_prompts


@pytest.fixture
def byte_prompts() -> list[list[int]]:
    """Five prompts of different lengths (byte ids)."""
    return [list(b"2+3="), list(b"hello"), list(b"a"), list(b"12*7=?"), list(b"xy")]
