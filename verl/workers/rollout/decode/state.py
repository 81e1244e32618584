"""The tensors of one decode step (:class:`DecodeState`): what the decode loop advances and the forwards read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class DecodeState:
    """Every tensor one decode step reads or writes, for ``B`` rows (a bucket). ``T``: response length,
    ``S``: cache capacity. Rows past the real ones are padding: finished from the start, ``row_ids = -1``."""

    cache: Any  # the forward's cache (e.g. per layer k and v [B, kv_heads, S, head_dim])
    key_ok: torch.Tensor  # [B, S] bool: slot may be attended apart from causality (real prompt tokens, responses)
    slots: torch.Tensor  # [S] long: 0..S-1
    last_tokens: torch.Tensor  # [B] long: the token fed at the next step
    position: torch.Tensor  # [B, 1] long: its position id
    cur: torch.Tensor  # [] long: its cache slot
    step: torch.Tensor  # [] long: the response index the next sampled token goes to
    finished: torch.Tensor  # [B] bool
    finish_step: torch.Tensor  # [B] long: response index at which the row finished (T: not yet, -1: padding)
    uniforms: torch.Tensor  # [B, T] float32: the uniform of each row and step (sampling)
    tokens: torch.Tensor  # [B, T] long
    log_probs: torch.Tensor  # [B, T] float32
    row_ids: torch.Tensor  # [B] long: row of the caller's batch (-1: padding)
    is_eos: torch.Tensor  # [vocab] bool: the end tokens of this call (data, not a constant: graphs outlive calls)
    banned: torch.Tensor  # [vocab] bool: tokens never sampled in this call (e.g. a vision model's image placeholder)

    def scalars(self) -> list[torch.Tensor]:
        """The small tensors a step advances (saved and restored around a warm-up run)."""
        return [self.last_tokens, self.position, self.cur, self.step, self.finished, self.finish_step]


def alloc_state(cache: Any, rows: int, capacity: int, length: int, vocab: int, device: Any) -> DecodeState:
    """A state of ``rows`` rows around ``cache``: every row finished (padding) until the loop starts real ones."""
    return DecodeState(
        cache=cache,
        key_ok=torch.zeros(rows, capacity, dtype=torch.bool, device=device),
        slots=torch.arange(capacity, device=device),
        last_tokens=torch.zeros(rows, dtype=torch.long, device=device),
        position=torch.zeros(rows, 1, dtype=torch.long, device=device),
        cur=torch.zeros((), dtype=torch.long, device=device),
        step=torch.zeros((), dtype=torch.long, device=device),
        finished=torch.ones(rows, dtype=torch.bool, device=device),
        finish_step=torch.full((rows,), -1, dtype=torch.long, device=device),
        uniforms=torch.zeros(rows, length, device=device),
        tokens=torch.zeros(rows, length, dtype=torch.long, device=device),
        log_probs=torch.zeros(rows, length, device=device),
        row_ids=torch.full((rows,), -1, dtype=torch.long, device=device),
        is_eos=torch.zeros(vocab, dtype=torch.bool, device=device),
        banned=torch.zeros(vocab, dtype=torch.bool, device=device),
    )
