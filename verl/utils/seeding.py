"""The seed schedule of generation: which seed each sampling call, replica and sub-call draws from.

One place defines how a run's seeds become the seeds of its draws, so that every engine and loop that generates
(the PPO driver, the fully asynchronous trainer, the ``hf`` and ``vllm`` engines, the agent loops' turn batches,
the partial-rollout continuations, on-policy distillation) draws from the same, reproducible streams:

* **call** ``i`` of a run (numbered by whoever checkpoints the count: the driver) samples with
  ``base_seed + i`` (:func:`generation_seed`), so a resumed run draws what the uninterrupted run drew;
* **data-parallel replica** ``r`` of one call offsets that seed by ``r`` (:func:`replica_seed`): replicas given the
  same prompts (``rollout.n`` copies split over ranks) would otherwise sample the same responses, while the ranks of
  one tensor-parallel group share ``r`` and agree (replica ``r`` of call ``c`` and replica ``r - 1`` of call
  ``c + 1`` share a seed; they sample other prompts with other weights);
* **sub-call** ``k`` of one call (the ``k``-th turn batch of the agent loops, the ``k``-th continuation of a
  partial rollout paused for a weight sync) offsets the call's seed by ``k * SUBCALL_STRIDE``
  (:func:`subcall_seed`); sub-call 0 is the call itself. The stride is a prime larger than the call and replica
  counts of a run of up to a few thousand calls, so a sub-call never draws with the seed of a call or a replica;
* the **data order** of epoch ``e`` (a shuffle of the dataset or of its files) draws with ``data_seed + e``
  (:func:`epoch_seed`);
* a **keyed stream** for draws numbered by a step or an epoch instead of a call (a mini-batch shuffle, a per-step
  coin, a per-step generation outside the driver's call count) is ``base_seed * KEY_STRIDE + key``
  (:func:`keyed_seed`): distinct ``(seed, key)`` pairs give distinct seeds for keys below the stride.

All functions take and return plain ints (``None`` passes through :func:`generation_seed` and
:func:`subcall_seed`: an unseeded run stays unseeded).
"""

from __future__ import annotations

__all__ = [
    "KEY_STRIDE",
    "SUBCALL_STRIDE",
    "epoch_seed",
    "generation_seed",
    "keyed_seed",
    "replica_seed",
    "subcall_seed",
]

SUBCALL_STRIDE = 7919
"""Seed offset between the sub-calls of one generation call (a prime: the 1000th)."""

KEY_STRIDE = 1_000_003
"""Multiplier of the base seed of a keyed stream (a prime above any step or epoch count a run reaches)."""


def generation_seed(base_seed: int | None, call: int) -> int | None:
    """The seed of generation call ``call`` (0-based, counted over the run) of a run seeded with ``base_seed``
    (``rollout.seed``): ``base_seed + call``; None when the run is unseeded."""
    return None if base_seed is None else int(base_seed) + int(call)


def replica_seed(seed: int, dp_rank: int) -> int:
    """The seed data-parallel replica ``dp_rank`` of one call (or one engine) samples with: ``seed + dp_rank``."""
    return int(seed) + int(dp_rank)


def subcall_seed(seed: int | None, index: int) -> int | None:
    """The seed of sub-call ``index`` of a call seeded with ``seed``: ``seed + index * SUBCALL_STRIDE`` (index 0:
    the call's own seed); None when the call is unseeded."""
    return None if seed is None else int(seed) + SUBCALL_STRIDE * int(index)


def epoch_seed(data_seed: int, epoch: int) -> int:
    """The seed of epoch ``epoch``'s data order (``data.seed`` + the epoch): ``data_seed + epoch``."""
    return int(data_seed) + int(epoch)


def keyed_seed(base_seed: int, key: int) -> int:
    """The seed of the draw numbered ``key`` (a step or an epoch) of a stream seeded with ``base_seed``:
    ``base_seed * KEY_STRIDE + key``."""
    return int(base_seed) * KEY_STRIDE + int(key)
