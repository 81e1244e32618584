"""Partial rollouts: stop generation when new weights are waiting, take them, and continue the same responses.

Upstream verl's fully asynchronous trainer (``async_training.partial_rollout``) interrupts the rollout engine at a
parameter sync and resumes the unfinished samples with the new weights, so a sync never waits for the longest
sample in flight. Here the hf engine's per-token hook (``on_step`` of
:meth:`verl.workers.rollout.hf_rollout.HFRollout.generate_sequences`) stops every unfinished row the moment a sync
is pending; after the sync each stopped row's prompt + partial response becomes a new prompt, generation continues
for the tokens it has left, and the pieces are joined back into one response of the original layout (tokens,
``response_mask``, ``rollout_log_probs``), as if generated in one go by a policy that changed mid-way.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from verl.protocol import DataProto
from verl.utils.seeding import subcall_seed
from verl.utils.torch_functional import pad_sequence_to_length
from verl.workers.rollout.base import build_rollout_output, resolve_sampling, resolve_special_ids

__all__ = ["generate_resumable"]


def _continuation_prompts(out: DataProto, rows: torch.Tensor, pad_id: int) -> DataProto:
    """The valid tokens of ``prompt ++ partial response`` of ``rows``, left-padded into a new prompt batch
    ``[len(rows), max_len]`` (positions restart from the original ones: a continuation sees the same positions)."""
    ids = out.batch["input_ids"][rows]
    mask = out.batch["attention_mask"][rows]
    positions = out.batch["position_ids"][rows]
    keep = [m.bool() for m in mask]
    width = max(int(k.sum()) for k in keep)
    new_ids = torch.full((len(rows), width), pad_id, dtype=ids.dtype)
    new_mask = torch.zeros((len(rows), width), dtype=mask.dtype)
    new_pos = torch.zeros((len(rows), width), dtype=positions.dtype)
    for i, k in enumerate(keep):
        n = int(k.sum())
        new_ids[i, width - n :] = ids[i][k]
        new_mask[i, width - n :] = 1
        new_pos[i, width - n :] = positions[i][k]
    return DataProto.from_dict(tensors={"input_ids": new_ids, "attention_mask": new_mask, "position_ids": new_pos})


def generate_resumable(
    engine: object,
    prompts: DataProto,
    sync_pending: Callable[[], bool],
    take_sync: Callable[[], None],
) -> tuple[DataProto, int]:
    """Generate ``prompts`` (the engine's input layout) with ``engine`` (an hf engine: ``generate_sequences``
    taking ``on_step``); whenever ``sync_pending()`` turns true, stop all unfinished rows, call ``take_sync()``
    (which loads the new weights) and continue those rows from where they stopped. Returns the output in the
    layout of one uninterrupted call, ``[bs, response_length]`` responses, and the number of interruptions.
    """
    settings = resolve_sampling(engine.config, prompts.meta_info)  # type: ignore[attr-defined]
    eos_ids, pad_id = resolve_special_ids(prompts.meta_info, engine.tokenizer)  # type: ignore[attr-defined]
    total = settings.response_length
    bs = len(prompts)
    paused = torch.zeros(bs, dtype=torch.bool)

    def hook(step: int, rows: slice, tokens: torch.Tensor, finished: torch.Tensor) -> torch.Tensor | None:
        if not sync_pending():
            return None
        paused[rows] |= ~finished.cpu()
        return torch.ones_like(finished)

    out = engine.generate_sequences(prompts, on_step=hook)  # type: ignore[attr-defined]
    lengths = out.batch["response_mask"].sum(-1)
    stopped = torch.nonzero(paused & (lengths < total)).flatten()
    if len(stopped) == 0:
        return out, 0
    take_sync()
    meta = dict(prompts.meta_info)
    meta["response_length"] = total - int(lengths[stopped].min())
    if meta.get("seed") is not None:
        meta["seed"] = subcall_seed(meta["seed"], 1)  # a fresh stream for the continuation, still reproducible
    cont_prompts = _continuation_prompts(out, stopped, pad_id)
    cont_prompts.meta_info = meta
    cont, interruptions = generate_resumable(engine, cont_prompts, sync_pending, take_sync)
    responses = out.batch["responses"].clone()
    log_probs = out.batch.get("rollout_log_probs")
    log_probs = None if log_probs is None else log_probs.clone()
    for j, row in enumerate(stopped.tolist()):
        done = int(lengths[row])
        left = total - done
        piece = cont.batch["responses"][j, :left]
        responses[row, done:] = pad_sequence_to_length(piece[None], left, pad_id)[0]
        if log_probs is not None and "rollout_log_probs" in cont.batch.keys():
            log_probs[row, done:] = pad_sequence_to_length(cont.batch["rollout_log_probs"][j, :left][None], left, 0.0)[
                0
            ]
    merged = build_rollout_output(prompts, responses, eos_ids, pad_id, total, log_probs=log_probs)
    return merged, interruptions + 1
