"""Peak memory of chunked vs naive token log-probs (forward + backward), the actor's memory hot spot.

naive:    log_softmax(logits.float()).gather(labels)  -> a float32 [tokens, vocab] copy kept for backward
chunked:  verl.utils.torch_functional.logprobs_from_logits -> one float32 [chunk, vocab] block at a time
compiled: the same with the compiled chunk kernels (verl.utils.logprob_kernels, what actor.use_torch_compile
          runs): each chunk's forward and backward fused by inductor, no float32 copy of the chunk (timed after
          one warm-up step on the same inputs, which compiles)

With ``--head`` the inputs are the final hidden states ``[tokens, H]`` and the LM head weight ``[V, H]`` instead
of the logits, both float32 as in the actor (fp32 master weights; ``--dtype`` bf16 then runs the step under bf16
autocast, as ``actor.dtype=bfloat16`` does), and the rows include the head's matmul and the gradients of hidden
and weight (the float32 weight gradient, the same in every row, is part of each peak):
head-naive:   logits = hidden @ W^T, then the naive log-softmax (the logits, their fp32 copy and gradient exist)
head-chunked: logits = hidden @ W^T, then the chunked log-probs (what use_fused_kernels=false runs)
head-compiled: the same with the compiled chunk kernels (use_torch_compile, on CUDA by default)
fused:        verl.utils.kernel.linear_cross_entropy.linear_logprobs_entropy (use_fused_kernels=true): log-probs
              and entropy per token chunk, never a [tokens, vocab] tensor

Peak is measured above the inputs (logits and labels already allocated), so the unavoidable logits gradient
(same dtype and size as the logits) is included in both rows. On CUDA it is torch.cuda.max_memory_allocated; on
CPU each case runs in a fresh subprocess and reports the growth of the process's peak RSS (VmHWM, reset after
the inputs are built; ru_maxrss where that is not possible), since torch's CPU allocations bypass tracemalloc.

    python bench/logprob_memory.py                  # 8192 tokens x 50k vocab, bf16 logits
    python bench/logprob_memory.py --smoke          # tiny and fast
    python bench/logprob_memory.py --device cuda --tokens 16384 --vocab 152064
    python bench/logprob_memory.py --head --tokens 4096 --vocab 151936 --hidden 896   # Qwen2.5-0.5B's head
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from bench._common import peak_rss_baseline_mib, peak_rss_mib  # noqa: E402
from verl.utils import torch_functional as verl_F  # noqa: E402
from verl.utils.kernel.linear_cross_entropy import linear_logprobs_entropy  # noqa: E402
from verl.utils.logprob_kernels import compiled_chunk_kernels  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
LOGIT_VARIANTS = ("naive", "chunked", "compiled")
HEAD_VARIANTS = ("head-naive", "head-chunked", "head-compiled", "fused")
COMPILED_VARIANTS = ("compiled", "head-compiled")


@dataclass
class Result:
    variant: str
    tokens: int
    vocab: int
    dtype: str
    chunk_size: int | None
    peak_mib: float
    seconds: float
    max_abs_diff: float | None = None


def _naive(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def _inputs(tokens: int, vocab: int, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Random logits ``[tokens, vocab]`` (filled block by block, so no large float32 temporary) and labels."""
    gen = torch.Generator(device=device).manual_seed(0)
    logits = torch.empty(tokens, vocab, dtype=dtype, device=device)
    rows = max(1, (1 << 22) // vocab)
    for start in range(0, tokens, rows):
        block = torch.randn(min(rows, tokens - start), vocab, generator=gen, device=device)
        logits[start : start + rows] = block.mul_(3)
    labels = torch.randint(0, vocab, (tokens,), generator=gen, device=device)
    return logits.requires_grad_(True), labels


def _head_inputs(tokens: int, vocab: int, hidden: int, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, ...]:
    """Random hidden states ``[tokens, H]``, head weight ``[V, H]`` (both requiring grad) and labels."""
    gen = torch.Generator(device=device).manual_seed(0)
    del dtype  # float32 master tensors; the compute dtype is the autocast's (see _step)
    h = torch.randn(tokens, hidden, generator=gen, device=device).requires_grad_(True)
    w = (torch.randn(vocab, hidden, generator=gen, device=device) * hidden**-0.5 * 3).requires_grad_(True)
    labels = torch.randint(0, vocab, (tokens,), generator=gen, device=device)
    return h, w, labels


def _logits_forward(variant: str, logits: torch.Tensor, labels: torch.Tensor, chunk: int | None) -> torch.Tensor:
    if variant in ("naive", "head-naive"):
        return _naive(logits, labels)
    kernels = compiled_chunk_kernels() if variant in COMPILED_VARIANTS else None
    return verl_F.logprobs_from_logits(logits, labels, chunk, kernels=kernels)


def _head_forward(variant: str, h: torch.Tensor, w: torch.Tensor, labels: torch.Tensor, chunk: int | None):
    if variant == "fused":
        return linear_logprobs_entropy(h, w, labels, chunk_size=chunk)[0]
    return _logits_forward(variant, h @ w.T, labels, chunk)


def _autocast(dtype: str, device: str):
    return torch.autocast(device, dtype=DTYPES[dtype], enabled=dtype != "fp32")


def _step(variant: str, inputs: tuple[torch.Tensor, ...], chunk_size: int | None, dtype: str) -> torch.Tensor:
    if variant in HEAD_VARIANTS:
        with _autocast(dtype, inputs[0].device.type):
            out = _head_forward(variant, *inputs, chunk_size)
    else:
        out = _logits_forward(variant, *inputs, chunk_size)
    out.sum().backward()
    return out.detach()


def _make_inputs(variant: str, tokens: int, vocab: int, hidden: int, dtype: str, device: str):
    if variant in HEAD_VARIANTS:
        return _head_inputs(tokens, vocab, hidden, DTYPES[dtype], device)
    return _inputs(tokens, vocab, DTYPES[dtype], device)


def run_cpu_case(variant: str, tokens: int, vocab: int, dtype: str, chunk_size: int | None, hidden: int) -> Result:
    """One measurement in this process (meant to be a fresh subprocess, so ru_maxrss is this case's peak)."""
    torch.set_num_threads(1)
    inputs = _make_inputs(variant, tokens, vocab, hidden, dtype, "cpu")
    if variant in COMPILED_VARIANTS:  # compile on these very shapes, outside the measurement
        _step(variant, inputs, chunk_size, dtype)
        _clear_grads(inputs)
    # Peak growth above the inputs: the current RSS when the peak mark can be reset, else the peak so far.
    before = peak_rss_baseline_mib()
    start = time.perf_counter()
    _step(variant, inputs, chunk_size, dtype)
    seconds = time.perf_counter() - start
    return Result(variant, tokens, vocab, dtype, chunk_size, peak_rss_mib() - before, seconds)


def _agreement(variants: tuple[str, ...], tokens: int, vocab: int, hidden: int, dtype: str, chunk, device) -> float:
    """max |first variant - last variant| of the log-probs on a small slice (costs little)."""
    inputs = _make_inputs(variants[0], min(tokens, 256), vocab, hidden, dtype, device)
    with torch.no_grad(), _autocast(dtype, device):
        if variants[0] in HEAD_VARIANTS:
            outs = [_head_forward(v, *inputs, chunk) for v in (variants[0], variants[-1])]
        else:
            outs = [_naive(*inputs), _logits_forward(variants[-1], *inputs, chunk)]
    return (outs[0] - outs[1]).abs().max().item()


def run_cpu(tokens: int, vocab: int, dtype: str, chunk_size: int | None, hidden: int, head: bool) -> list[Result]:
    results = []
    variants = HEAD_VARIANTS if head else LOGIT_VARIANTS
    for variant in variants:
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            variant,
            "--tokens",
            str(tokens),
            "--vocab",
            str(vocab),
            "--dtype",
            dtype,
            "--hidden",
            str(hidden),
        ]
        if chunk_size is not None:
            cmd += ["--chunk-size", str(chunk_size)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        results.append(Result(**json.loads(proc.stdout.strip().splitlines()[-1])))
    results[-1].max_abs_diff = _agreement(variants, tokens, vocab, hidden, dtype, chunk_size, "cpu")
    return results


def _clear_grads(inputs: tuple[torch.Tensor, ...]) -> None:
    for t in inputs:
        t.grad = None


def run_cuda(
    tokens: int, vocab: int, dtype: str, chunk_size: int | None, hidden: int, head: bool, repeats: int = 3
) -> list[Result]:
    results = []
    outputs = {}
    variants = HEAD_VARIANTS if head else LOGIT_VARIANTS
    for variant in variants:
        inputs = _make_inputs(variant, tokens, vocab, hidden, dtype, "cuda")
        _step(variant, inputs, chunk_size, dtype)  # warm-up (kernels, allocator)
        _clear_grads(inputs)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        times = []
        for _ in range(repeats):
            torch.cuda.synchronize()
            start = time.perf_counter()
            outputs[variant] = _step(variant, inputs, chunk_size, dtype)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
            _clear_grads(inputs)
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        results.append(Result(variant, tokens, vocab, dtype, chunk_size, peak, sorted(times)[len(times) // 2]))
        del inputs
        torch.cuda.empty_cache()
    results[-1].max_abs_diff = (outputs[variants[0]] - outputs[variants[-1]]).abs().max().item()
    return results


def print_table(results: list[Result], device: str) -> None:
    print(f"device={device}  (peak = memory above the inputs during forward+backward)")
    header = f"{'variant':<12} {'tokens':>7} {'vocab':>7} {'dtype':>5} {'chunk':>6} {'peak MiB':>10} {'time s':>8}"
    print(header)
    print("-" * len(header))
    for r in results:
        chunk = "auto" if r.chunk_size is None else str(r.chunk_size)
        if r.variant in ("naive", "head-naive"):
            chunk = "-"
        print(
            f"{r.variant:<12} {r.tokens:>7} {r.vocab:>7} {r.dtype:>5} {chunk:>6} {r.peak_mib:>10.1f} {r.seconds:>8.3f}"
        )
    naive, last = results[0], results[-1]
    for r in results[1:]:
        ratio = naive.peak_mib / r.peak_mib if r.peak_mib > 0 else float("inf")
        print(f"{r.variant} peak is {ratio:.1f}x smaller than {naive.variant}")
    print(f"max |{naive.variant} - {last.variant}| = {last.max_abs_diff:.2e}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--vocab", type=int, default=50_000)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--chunk-size", type=int, default=None, help="tokens per chunk (default: automatic)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes for a quick check")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    parser.add_argument("--head", action="store_true", help="inputs are hidden [tokens, H] and W [V, H]")
    parser.add_argument("--hidden", type=int, default=896, help="H of the --head rows (Qwen2.5-0.5B: 896)")
    parser.add_argument("--worker", choices=LOGIT_VARIANTS + HEAD_VARIANTS, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker is not None:
        result = run_cpu_case(args.worker, args.tokens, args.vocab, args.dtype, args.chunk_size, args.hidden)
        print(json.dumps(asdict(result)))
        return
    if args.smoke:
        args.tokens, args.vocab, args.hidden = 512, 4096, 64
        args.chunk_size = args.chunk_size or 64
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        results = run_cuda(args.tokens, args.vocab, args.dtype, args.chunk_size, args.hidden, args.head)
    else:
        results = run_cpu(args.tokens, args.vocab, args.dtype, args.chunk_size, args.hidden, args.head)
    name = f"cpu ({torch.backends.cpu.get_cpu_capability()})" if device == "cpu" else torch.cuda.get_device_name()
    print_table(results, name)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([asdict(r) for r in results], fh, indent=2)


if __name__ == "__main__":
    main()
