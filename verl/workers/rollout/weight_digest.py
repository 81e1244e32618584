"""Digests of synced weights: after a weight sync the rollout engine must hold the trainer's weights.

A digest of a tensor is ``(numel, sum, sum of squares)`` accumulated in float64. The trainer's side digests each
tensor as it streams out (:class:`DigestingStream`, nothing is copied); the engine's side digests what it holds
afterwards, read back from its own parameters under the same names (:func:`module_digest`, :func:`vllm_held_digest`).
:func:`check_weight_sync` compares the two and raises :class:`WeightSyncMismatchError` naming the tensors that
differ: a tensor never sent (a LoRA adapter filtered out of the push), never loaded (a sync skipped), or altered on
the way (a corrupted transfer).

Sums and sums of squares add up over concatenation, so a fused engine parameter (vLLM's ``qkv_proj`` packs
``q_proj``, ``k_proj`` and ``v_proj``; a padded vocabulary adds zeros) is compared with the sum of its parts' digests.
Where the two sides keep different dtypes (a bf16 engine fed fp32 weights) the comparison allows the rounding of the
coarser dtype (``u = eps / 2``): ``|d sum| <= u sqrt(numel sumsq)`` (Cauchy-Schwarz on ``u sum |x_i|``) and
``|d sumsq| <= 2.01 u sumsq``, so there a difference smaller than that rounding passes (about 0.4% of the sum of
squares in bf16); with equal dtypes (or a stream digested in the engine's dtype, ``cast``) only the float64
accumulation order is allowed for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "TensorDigest",
    "WeightSyncMismatchError",
    "DigestingStream",
    "tensor_digest",
    "module_digest",
    "compare_digests",
    "check_weight_sync",
    "vllm_held_digest",
    "expected_for_packed",
    "check_vllm_sync",
    "check_push_report",
]

MAX_LISTED = 5  # tensors named in the error message (then a count)
CHUNK = 1 << 18  # elements digested at a time (a 2 MB float64 buffer)


class WeightSyncMismatchError(RuntimeError):
    """After a weight sync the rollout engine does not hold the trainer's weights (names the tensors that differ)."""


@dataclass(frozen=True)
class TensorDigest:
    """``numel``, ``total`` (float64 sum), ``sumsq`` (float64 sum of squares) and ``dtype`` (name) of one tensor."""

    numel: int
    total: float
    sumsq: float
    dtype: str

    def __add__(self, other: TensorDigest) -> TensorDigest:
        dtype = self.dtype if self.dtype == other.dtype else f"{self.dtype}|{other.dtype}"
        return TensorDigest(self.numel + other.numel, self.total + other.total, self.sumsq + other.sumsq, dtype)


def tensor_digest(tensor: torch.Tensor) -> TensorDigest:
    """The digest of ``tensor`` (any shape; float64 accumulation on the tensor's own device, in chunks of
    :data:`CHUNK` elements copied into one float64 buffer, so no float64 copy of the whole tensor is made)."""
    flat = tensor.detach().reshape(-1)
    total = torch.zeros((), dtype=torch.float64, device=flat.device)
    sumsq = torch.zeros((), dtype=torch.float64, device=flat.device)
    # one float64 buffer reused for every chunk: no allocation (and no fresh pages) per chunk
    buf = torch.empty(min(CHUNK, max(flat.numel(), 1)), dtype=torch.float64, device=flat.device)
    for chunk in flat.split(CHUNK):
        d = buf[: chunk.numel()]
        d.copy_(chunk)
        total += d.sum()
        sumsq += torch.dot(d, d)
    return TensorDigest(int(tensor.numel()), float(total.item()), float(sumsq.item()), _dt(tensor))


def _dt(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


class DigestingStream:
    """Wraps a lazy ``(name, tensor)`` stream and digests each tensor as it is pulled (``digests``: name -> digest,
    in stream order; with ``cast``, of each floating tensor cast to that dtype). ``pulled`` is the set of names
    consumed so far (what the engine itself read, when taken before the caller drains the rest)."""

    def __init__(self, named_tensors: Iterable[tuple[str, torch.Tensor]], cast: torch.dtype | None = None) -> None:
        self._it = iter(named_tensors)
        self._cast = cast  # digest floating tensors as the engine will store them (it casts to its dtype)
        self.digests: dict[str, TensorDigest] = {}

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return self

    def __next__(self) -> tuple[str, torch.Tensor]:
        name, tensor = next(self._it)
        cast = self._cast is not None and tensor.is_floating_point() and tensor.dtype != self._cast
        self.digests[name] = tensor_digest(tensor.detach().to(self._cast) if cast else tensor)
        return name, tensor

    @property
    def pulled(self) -> set[str]:
        return set(self.digests)


def module_digest(module: torch.nn.Module, lora_only: bool = False) -> dict[str, TensorDigest]:
    """Digests of ``module``'s state dict (parameters and persistent buffers, tied weights under each name); with
    ``lora_only`` only the adapter tensors (names holding ``lora_``), else only the others."""
    out: dict[str, TensorDigest] = {}
    with torch.no_grad():
        for name, tensor in module.state_dict(keep_vars=True).items():
            if ("lora_" in name) == lora_only:
                out[name] = tensor_digest(tensor)
    return out


def _eps(dtype: str) -> float:
    try:
        return float(torch.finfo(getattr(torch, dtype)).eps)
    except (AttributeError, TypeError):
        return 0.0  # integer tensors: exact


def _tolerance(sent: TensorDigest, held: TensorDigest) -> tuple[float, float]:
    """Allowed ``(|d sum|, |d sumsq|)``: where the dtypes differ, round-to-nearest in the coarser one (unit roundoff
    ``u = eps / 2``, each element off by at most ``u |x|``: ``|d sum| <= u sqrt(n sumsq)``, ``|d sumsq| <= 2.01 u
    sumsq``); with equal dtypes only the float64 accumulation order."""
    if sent.dtype == held.dtype:
        u = 1e-13 * max(sent.numel, 1) ** 0.5
    else:
        u = max(_eps(d) for part in (sent.dtype, held.dtype) for d in part.split("|")) / 2
    sumsq = max(sent.sumsq, held.sumsq)
    return u * math.sqrt(max(sent.numel, held.numel, 1) * sumsq) + 1e-30, 2.01 * u * sumsq + 1e-30


def compare_digests(sent: dict[str, TensorDigest], held: dict[str, TensorDigest]) -> list[str]:
    """One line per tensor that differs between the trainer's ``sent`` digests and the engine's ``held`` ones:
    held but never sent, sent but not held, or different content."""
    problems: list[str] = []
    for name, have in held.items():
        want = sent.get(name)
        if want is None:
            problems.append(f"{name}: held by the engine but never sent by the trainer")
            continue
        tol_sum, tol_sq = _tolerance(want, have)
        if abs(want.total - have.total) > tol_sum or abs(want.sumsq - have.sumsq) > tol_sq:
            problems.append(
                f"{name}: trainer sum {want.total:.9g} sumsq {want.sumsq:.9g}, engine sum {have.total:.9g} "
                f"sumsq {have.sumsq:.9g}"
            )
    for name in sent:
        if name not in held:
            problems.append(f"{name}: sent by the trainer but the engine holds no tensor of that name")
    return problems


def check_weight_sync(
    sent: dict[str, TensorDigest], held: dict[str, TensorDigest], where: str, switch: str, extra: list[str] = ()
) -> None:
    """Raise :class:`WeightSyncMismatchError` when :func:`compare_digests` (plus ``extra`` problems found by the
    caller) finds any: the first :data:`MAX_LISTED` tensors, the count, ``where`` the sync happened and the config
    ``switch`` that turns the check off."""
    problems = list(extra) + compare_digests(sent, held)
    if not problems:
        return
    listed = "; ".join(problems[:MAX_LISTED])
    more = f" (and {len(problems) - MAX_LISTED} more)" if len(problems) > MAX_LISTED else ""
    raise WeightSyncMismatchError(
        f"{where}: after the weight sync the rollout engine does not hold the trainer's weights: "
        f"{len(problems)} of {max(len(held), len(sent))} tensors differ: {listed}{more} ({switch}=false turns this "
        "check off)"
    )


# --------------------------------------------------------------------------------------------------------- vLLM
def vllm_held_digest(worker: Any) -> dict[str, Any]:
    """Run inside a vLLM worker (``LLM.collective_rpc``): digests of the model's parameters as the engine holds
    them, the names whose storage the engine repacked out of reach (empty parameters: vLLM's CPU backend moves
    linear weights into packed kernels, so they cannot be read back) and the model's ``packed_modules_mapping``."""
    model = worker.model_runner.model
    held: dict[str, TensorDigest] = {}
    unreadable: list[str] = []
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.numel() == 0:
                unreadable.append(name)
            else:
                held[name] = tensor_digest(param)
    packed = {k: list(v) for k, v in dict(getattr(model, "packed_modules_mapping", {}) or {}).items()}
    return {"held": held, "unreadable": unreadable, "packed": packed}


def expected_for_packed(name: str, packed: dict[str, list[str]]) -> list[str]:
    """The trainer (transformers) names an engine parameter ``name`` is made of: ``...qkv_proj.weight`` ->
    ``[...q_proj.weight, ...k_proj.weight, ...v_proj.weight]`` per ``packed`` (engine module -> parts); itself
    when it is not fused."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part in packed:
            return [".".join(parts[:i] + [p] + parts[i + 1 :]) for p in packed[part]]
    return [name]


def check_vllm_sync(sent: dict[str, TensorDigest], pulled: set[str], report: dict[str, Any], where: str) -> None:
    """Compare what a vLLM engine holds (``report`` of :func:`vllm_held_digest`) with the trainer's ``sent``
    digests: each readable engine parameter against the sum of its parts' digests; each unreadable (repacked) one
    by whether the engine itself read every part from the stream (``pulled``, taken before the caller drained it)."""
    packed = report["packed"]
    sent_by_engine_name: dict[str, TensorDigest] = {}
    extra: list[str] = []
    for name in report["held"]:
        parts = expected_for_packed(name, packed)
        if any(p not in sent for p in parts):
            continue  # reported by compare_digests as "never sent"
        total = sent[parts[0]]
        for p in parts[1:]:
            total = total + sent[p]
        sent_by_engine_name[name] = total
    for name in report["unreadable"]:
        not_read = [p for p in expected_for_packed(name, packed) if p not in pulled]
        if not_read:
            extra.append(f"{name}: the engine never read {', '.join(not_read)} from the trainer's stream")
    check_weight_sync(sent_by_engine_name, report["held"], where, "actor_rollout_ref.rollout.check_weight_sync", extra)


def check_push_report(sent: dict[str, TensorDigest], report: dict[str, Any], where: str) -> None:
    """Compare the trainer's ``sent`` digests of one push with the rollout process's ``report`` of what its engine
    holds afterwards (``{"engine": "hf", "held": digests}`` or ``{"engine": "vllm", "report": ..., "pulled":
    names}``); raises :class:`WeightSyncMismatchError`."""
    if report["engine"] == "vllm":
        check_vllm_sync(sent, set(report["pulled"]), report["report"], where)
    else:
        check_weight_sync(sent, report["held"], where, "actor_rollout_ref.rollout.check_weight_sync")
