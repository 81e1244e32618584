"""The chunk kernels of the log-probs and entropy (verl/utils/logprob_kernels.py): compiled (inductor) they give the
eager values and gradients; a failed compilation falls back to eager under ``use_torch_compile: null`` and stops
the run under ``true``; ``use_torch_compile`` decides which set the actor gets."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.exc import TorchDynamoException

from verl.utils import logprob_kernels
from verl.utils.fsdp_utils import log_prob_kernels_for
from verl.utils.logprob_kernels import EAGER_KERNELS, compiled_chunk_kernels
from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits


def _log_probs_entropy_and_grad(logits: torch.Tensor, labels: torch.Tensor, kernels, chunk: int):
    """Log-probs and entropy of the strided view ``logits[:, :-1]`` and the gradient of a weighted sum of both."""
    x = logits.detach().requires_grad_()
    lp = logprobs_from_logits(x[:, :-1], labels, chunk_size=chunk, kernels=kernels)
    ent = entropy_from_logits(x[:, :-1], chunk_size=chunk, kernels=kernels)
    weights = torch.linspace(-1.0, 2.0, labels.numel(), device=logits.device).view(labels.shape)
    ((lp * weights).sum() + (ent * weights.flip(-1)).sum()).backward()
    return lp.detach(), ent.detach(), x.grad


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_compiled_kernels_give_the_eager_values_and_gradients(dtype) -> None:
    """Inductor on this device (CPU here, CUDA on a GPU), bf16 and fp32 logits of a strided view, rows split into
    chunks: log-probs, entropies and the logits' gradient within rounding of the eager kernels."""
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(2, 9, 1000, generator=gen) * 3).to(dtype)
    labels = torch.randint(0, 1000, (2, 8), generator=gen)
    eager = _log_probs_entropy_and_grad(logits, labels, None, chunk=4)
    compiled = _log_probs_entropy_and_grad(logits, labels, compiled_chunk_kernels(), chunk=4)
    for name, a, b in zip(("log-probs", "entropy"), eager[:2], compiled[:2]):
        assert a.dtype == b.dtype == torch.float32, name
        torch.testing.assert_close(b, a, atol=2e-5, rtol=1e-5, msg=name)
    assert compiled[2].dtype == dtype
    tol = {torch.bfloat16: 1e-2, torch.float32: 1e-5}[dtype]
    torch.testing.assert_close(compiled[2].float(), eager[2].float(), atol=1e-6, rtol=tol)
    # the gradient is real: d log p(y) / d x_y = 1 - p_y > 0 for a positive weight
    assert eager[2].abs().sum() > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="inductor's CUDA kernels need a CUDA device")
def test_compiled_kernels_give_the_eager_values_and_gradients_on_cuda() -> None:
    """The same check with inductor's Triton kernels: a 151,936-token vocabulary (Qwen2.5's), bf16 logits, one
    chunk shape (one compilation per kernel)."""
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(2, 65, 151936, generator=gen) * 3).to(torch.bfloat16).cuda()
    labels = torch.randint(0, 151936, (2, 64), generator=gen).cuda()
    eager = _log_probs_entropy_and_grad(logits, labels, None, chunk=64)
    compiled = _log_probs_entropy_and_grad(logits, labels, compiled_chunk_kernels(), chunk=64)
    for a, b in zip(eager[:2], compiled[:2]):
        torch.testing.assert_close(b, a, atol=5e-5, rtol=1e-5)
    torch.testing.assert_close(compiled[2].float(), eager[2].float(), atol=1e-6, rtol=1e-2)


def _failing_backend(gm, example_inputs):
    raise TypeError("list indices must be integers or slices, not NoneType")  # what inductor raised on an H200


def test_a_failed_compilation_falls_back_to_eager_under_auto_and_stops_under_true(monkeypatch, caplog) -> None:
    monkeypatch.setattr(logprob_kernels, "_COMPILED", {})
    gen = torch.Generator().manual_seed(1)
    logits, labels = torch.randn(1, 7, 50, generator=gen), torch.randint(0, 50, (1, 6), generator=gen)
    expected = _log_probs_entropy_and_grad(logits, labels, None, chunk=3)
    auto = compiled_chunk_kernels(eager_on_failure=True, backend=_failing_backend)
    with caplog.at_level("WARNING", logger="verl.utils.logprob_kernels"):
        for _ in range(2):
            got = _log_probs_entropy_and_grad(logits, labels, auto, chunk=3)
            for a, b in zip(expected, got):
                torch.testing.assert_close(b, a)
    lines = [r.getMessage() for r in caplog.records if "run eagerly" in r.getMessage()]
    assert len(lines) == 1 and "list indices" in lines[0]  # one line for the whole set
    strict = compiled_chunk_kernels(eager_on_failure=False, backend=_failing_backend)
    with pytest.raises(TorchDynamoException):
        logprobs_from_logits(logits[:, :-1], labels, kernels=strict)


def test_use_torch_compile_picks_the_actors_kernels(monkeypatch) -> None:
    monkeypatch.setattr(logprob_kernels, "_COMPILED", {})
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert log_prob_kernels_for(None, cpu) is None and log_prob_kernels_for(False, cuda) is None
    auto = log_prob_kernels_for(None, cuda)
    assert auto.compiled and auto.logprob_forward.eager_on_failure
    strict = log_prob_kernels_for(True, cpu)
    assert strict.compiled and not strict.logprob_forward.eager_on_failure
    assert log_prob_kernels_for(True, cuda) is strict  # one compiled set per process
    assert not EAGER_KERNELS.compiled
