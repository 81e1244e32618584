"""``reward_model.gpu_memory_utilization``: the reward model's own footprint on its device kept within a share.

Upstream serves the reward model with an inference engine (vLLM / SGLang) whose ``gpu_memory_utilization`` is the
fraction of the device's memory the engine may take for its weights and its KV cache; colocated with the actor, the
engine sleeps while the actor trains (upstream ``verl/experimental/reward_loop/reward_model.py``, ``sleep`` /
``wake_up``). Here the reward model is a forward pass in the ``rm`` worker, so the share bounds what that forward
pass holds on the device::

    weights + activations of one scoring micro-batch  <=  share x total device memory

* at init, :meth:`ScoringBudget.check_weights` fails with one line when the weights alone exceed the share;
* while scoring, :meth:`ScoringBudget.next_rows` sizes each micro-batch by the bytes left for activations,
  ``free = share x total - weights``, and an activation cost per token, never above ``micro_batch_size_per_gpu``:
  ``rows = max n such that (sum of the n rows' tokens) x cost(width) <= free``;
* the cost per token starts at the estimate :func:`estimated_bytes_per_token` + ``width_term(width)`` (the
  attention-score row a token holds in eager attention, ``4 bytes x heads x width``). On CUDA it is re-measured from
  every micro-batch's peak (``torch.cuda.max_memory_allocated`` above the allocation before it): ``rate = peak /
  tokens`` at that micro-batch's ``width0``, and then ``cost(width) = rate + max(0, width_term(width) -
  width_term(width0))`` (the cost never falls with the width; a longer width adds its attention row). The first
  micro-batch on CUDA is one row (a probe), so the estimate never sizes more than one row.

On CPU the "device" is the machine's RAM (``os.sysconf``), and the cost stays the estimate (the CPU allocator reports
no peak): the same weights check and micro-batch bound, against RAM.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

GIB = 1024**3
KEY = "reward_model.gpu_memory_utilization"


def module_bytes(module: torch.nn.Module) -> int:
    """Bytes of ``module``'s parameters and buffers (as stored: the weights' footprint on the device)."""
    tensors = [*module.parameters(), *module.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


def device_memory_bytes(device: torch.device) -> int:
    """Total memory of ``device``: a CUDA device's own memory, else the machine's physical RAM."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def attention_bytes_per_token(model_config: Any, width: int) -> int:
    """The attention-score row one token holds in eager attention: ``4 bytes x num_attention_heads x width``."""
    return 4 * int(model_config.num_attention_heads) * int(width)


def estimated_bytes_per_token(model_config: Any, activation_dtype: torch.dtype) -> int:
    """Width-independent activation bytes one token holds at the peak of a no-grad decoder layer, from the model's
    config: the residual stream and its fp32 normed copy (``2 x 4 x hidden``), q / k / v and the attention output
    (``4 x hidden``) and the MLP's gate, up and activated product (``3 x intermediate``) in the activation dtype,
    and the layer output (``hidden``). ``intermediate`` defaults to ``4 x hidden`` for configs without it."""
    hidden = int(model_config.hidden_size)
    intermediate = int(getattr(model_config, "intermediate_size", None) or 4 * hidden)
    size = torch.empty((), dtype=activation_dtype).element_size()
    return 8 * hidden + size * (5 * hidden + 3 * intermediate)


class ScoringBudget:
    """Micro-batch sizing for a reward model bounded to ``share`` of ``total`` device bytes (module docstring).

    ``base_estimate + width_term(width)`` is the estimated cost per token; ``measured`` says whether peaks are
    observed (CUDA: the first micro-batch is a one-row probe) or the estimate stays (CPU)."""

    def __init__(
        self,
        share: float,
        total: int,
        weights: int,
        base_estimate: int,
        width_term: Callable[[int], int],
        max_rows: int,
        measured: bool,
    ):
        self.share = float(share)
        self.total = int(total)
        self.limit = int(self.share * self.total)
        self.weights = int(weights)
        self.free = self.limit - self.weights
        self.width_term = width_term
        self.rate, self.rate_width = int(base_estimate) + width_term(0), 0
        self.max_rows = int(max_rows)
        self.probe = measured  # the first micro-batch is one row until a peak was measured

    def check_weights(self, device: torch.device) -> None:
        """Fail (one line) when the weights alone exceed ``share x total``."""
        if self.free <= 0:
            raise ValueError(
                f"{KEY}={self.share}: the reward model's weights take {self.weights / GIB:.2f} GiB, more than "
                f"{self.share} x {self.total / GIB:.2f} GiB of {device}; raise the share or use a smaller reward model"
            )

    def cost(self, width: int) -> int:
        """Activation bytes per token at padded ``width``: ``rate + max(0, width_term(width) - width_term(width0))``."""
        return max(1, self.rate + max(0, self.width_term(width) - self.width_term(self.rate_width)))

    def next_rows(self, row_tokens: list[int], width: int) -> int:
        """How many of the next rows (``row_tokens``: the tokens each row feeds the model, in order) one micro-batch
        takes: the most whose tokens x ``cost(width)`` fit in the free bytes, 1 to ``max_rows``; one row (the probe)
        until a peak was measured. Fails (one line) when even one row does not fit."""
        cost = self.cost(width)
        if row_tokens[0] * cost > self.free:
            raise ValueError(
                f"{KEY}={self.share}: one row of {row_tokens[0]} tokens needs about "
                f"{row_tokens[0] * cost / GIB:.2f} GiB of activations beyond the weights' {self.weights / GIB:.2f} "
                f"GiB, more than {self.share} x {self.total / GIB:.2f} GiB; raise the share or lower "
                "reward_model.max_length"
            )
        if self.probe:
            return 1
        rows, tokens = 0, 0
        for n in row_tokens[: self.max_rows]:
            if (tokens + n) * cost > self.free:
                break
            rows, tokens = rows + 1, tokens + n
        return max(rows, 1)

    def observe(self, tokens: int, width: int, peak: int) -> None:
        """Re-measure the cost from a micro-batch of ``tokens`` at ``width`` whose activations peaked at ``peak``
        bytes above the allocation before it: ``rate = ceil(peak / tokens)`` at ``width0 = width``."""
        self.rate, self.rate_width = -(-int(peak) // max(int(tokens), 1)), int(width)
        self.probe = False


def measured_peak(device: torch.device, run: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, int | None]:
    """``run()`` and the peak bytes it allocated on ``device`` above what was allocated before (CUDA; ``None``
    elsewhere). The process's lifetime peak is kept (``verl.utils.device.reset_peak_memory_stats``)."""
    if device.type != "cuda":
        return run(), None
    from verl.utils.device import reset_peak_memory_stats

    before = torch.cuda.memory_allocated(device)
    reset_peak_memory_stats(device)
    out = run()
    return out, torch.cuda.max_memory_allocated(device) - before
