"""Whether two runs of the same command with the same seed give the same numbers, for the engine this run uses.

What makes a PPO/GRPO run repeat itself exactly: every random draw is seeded (``trainer.seed`` for python, numpy and
torch at start; each generation call is seeded with ``rollout.seed`` plus the call's index, a count the checkpoint
keeps; the data order with ``data.seed``; the actor's mini-batch shuffles with their own generator), and every
kernel adds in a fixed order. On CPU torch's kernels are deterministic for a given thread count, so the same command
on the same machine repeats itself to the last digit (``trainer.torch_threads`` fixes the count where the default,
the number of physical cores, could differ). On CUDA that holds only with deterministic kernels
(``trainer.deterministic=true``). vLLM's kernels are not batch-invariant on CUDA (a sequence's logits depend on what
else is in its batch), so vLLM runs on a GPU can part after the first update; on CPU its sampling noise is drawn
from the call's seed (:meth:`verl.workers.rollout.vllm_rollout.vLLMRollout.generate_sequences`).

:func:`reproducibility` says which case a run is in; the actor worker logs it once and reports it each step as
``training/reproducible`` (1: the same command repeats these metrics exactly; 0: it may not).
"""

from __future__ import annotations

__all__ = ["reproducibility"]


def reproducibility(engine: str, device: str, deterministic: bool) -> tuple[bool, str]:
    """``(reproducible, one line saying why)`` for rollout ``engine`` (``hf``, ``vllm``, ``given``...) on ``device``
    (``cpu``, ``cuda``...) with ``trainer.deterministic``."""
    on_gpu = device != "cpu"
    if engine == "vllm" and on_gpu:
        return False, (
            "not reproducible: vLLM on a GPU is not batch-invariant (a sequence's logits depend on its batch), so two "
            "runs with the same seed can differ after the first update; rollout.name=hf with "
            "trainer.deterministic=true repeats itself"
        )
    if on_gpu and not deterministic:
        return False, (
            "not reproducible: CUDA kernels may add in a different order on each run; trainer.deterministic=true "
            "asks torch for deterministic ones (slower)"
        )
    if engine not in ("hf", "vllm"):
        return False, f"unknown: rollout engine {engine!r} is the caller's own; its sampling decides"
    return True, (
        f"reproducible: {engine} engine on {device}: the same command with the same seed gives the same metrics at "
        "every step on this machine (same thread count: trainer.torch_threads fixes it)"
    )
