"""Peak memory of chunked vs naive token log-probs (forward + backward), the actor's memory hot spot.

naive:   log_softmax(logits.float()).gather(labels)  -> a float32 [tokens, vocab] copy kept for backward
chunked: verl.utils.torch_functional.logprobs_from_logits -> one float32 [chunk, vocab] block at a time

Peak is measured above the inputs (logits and labels already allocated), so the unavoidable logits gradient
(same dtype and size as the logits) is included in both rows. On CUDA it is torch.cuda.max_memory_allocated; on
CPU each case runs in a fresh subprocess and reports the growth of the process's peak RSS (VmHWM, reset after
the inputs are built; ru_maxrss where that is not possible), since torch's CPU allocations bypass tracemalloc.

    python bench/logprob_memory.py                  # 8192 tokens x 50k vocab, bf16 logits
    python bench/logprob_memory.py --smoke          # tiny and fast
    python bench/logprob_memory.py --device cuda --tokens 16384 --vocab 152064
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import torch

from verl.utils import torch_functional as verl_F

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


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


def _step(variant: str, logits: torch.Tensor, labels: torch.Tensor, chunk_size: int | None) -> torch.Tensor:
    out = _naive(logits, labels) if variant == "naive" else verl_F.logprobs_from_logits(logits, labels, chunk_size)
    out.sum().backward()
    return out.detach()


def _proc_status_mib(field: str) -> float | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS; False where not permitted."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _peak_rss_mib() -> float:
    hwm = _proc_status_mib("VmHWM")
    if hwm is not None:
        return hwm
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def run_cpu_case(variant: str, tokens: int, vocab: int, dtype: str, chunk_size: int | None) -> Result:
    """One measurement in this process (meant to be a fresh subprocess, so ru_maxrss is this case's peak)."""
    torch.set_num_threads(1)
    logits, labels = _inputs(tokens, vocab, DTYPES[dtype], "cpu")
    # Peak growth above the inputs: the current RSS when the peak mark can be reset, else the peak so far.
    current = _proc_status_mib("VmRSS")
    before = current if _reset_peak_rss() and current is not None else _peak_rss_mib()
    start = time.perf_counter()
    _step(variant, logits, labels, chunk_size)
    seconds = time.perf_counter() - start
    return Result(variant, tokens, vocab, dtype, chunk_size, _peak_rss_mib() - before, seconds)


def run_cpu(tokens: int, vocab: int, dtype: str, chunk_size: int | None) -> list[Result]:
    results = []
    for variant in ("naive", "chunked"):
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
        ]
        if chunk_size is not None:
            cmd += ["--chunk-size", str(chunk_size)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        results.append(Result(**json.loads(proc.stdout.strip().splitlines()[-1])))
    # Agreement check in this process (small slice, so it costs little).
    logits, labels = _inputs(min(tokens, 256), vocab, DTYPES[dtype], "cpu")
    diff = (_naive(logits, labels) - verl_F.logprobs_from_logits(logits, labels, chunk_size)).abs().max().item()
    results[1].max_abs_diff = diff
    return results


def run_cuda(tokens: int, vocab: int, dtype: str, chunk_size: int | None, repeats: int = 3) -> list[Result]:
    results = []
    outputs = {}
    for variant in ("naive", "chunked"):
        logits, labels = _inputs(tokens, vocab, DTYPES[dtype], "cuda")
        _step(variant, logits, labels, chunk_size)  # warm-up (kernels, allocator)
        logits.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        times = []
        for _ in range(repeats):
            torch.cuda.synchronize()
            start = time.perf_counter()
            outputs[variant] = _step(variant, logits, labels, chunk_size)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
            logits.grad = None
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        results.append(Result(variant, tokens, vocab, dtype, chunk_size, peak, sorted(times)[len(times) // 2]))
        del logits, labels
        torch.cuda.empty_cache()
    results[1].max_abs_diff = (outputs["naive"] - outputs["chunked"]).abs().max().item()
    return results


def print_table(results: list[Result], device: str) -> None:
    print(f"device={device}  (peak = memory above the inputs during forward+backward)")
    header = f"{'variant':<8} {'tokens':>7} {'vocab':>7} {'dtype':>5} {'chunk':>6} {'peak MiB':>10} {'time s':>8}"
    print(header)
    print("-" * len(header))
    for r in results:
        chunk = "auto" if r.chunk_size is None else str(r.chunk_size)
        if r.variant == "naive":
            chunk = "-"
        print(
            f"{r.variant:<8} {r.tokens:>7} {r.vocab:>7} {r.dtype:>5} {chunk:>6} {r.peak_mib:>10.1f} {r.seconds:>8.3f}"
        )
    naive, chunked = results
    ratio = naive.peak_mib / chunked.peak_mib if chunked.peak_mib > 0 else float("inf")
    print(f"chunked peak is {ratio:.1f}x smaller; max |naive - chunked| = {chunked.max_abs_diff:.2e}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--vocab", type=int, default=50_000)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--chunk-size", type=int, default=None, help="tokens per chunk (default: automatic)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes for a quick check")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    parser.add_argument("--worker", choices=["naive", "chunked"], default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker is not None:
        print(json.dumps(asdict(run_cpu_case(args.worker, args.tokens, args.vocab, args.dtype, args.chunk_size))))
        return
    if args.smoke:
        args.tokens, args.vocab = 512, 4096
        args.chunk_size = args.chunk_size or 64
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        results = run_cuda(args.tokens, args.vocab, args.dtype, args.chunk_size)
    else:
        results = run_cpu(args.tokens, args.vocab, args.dtype, args.chunk_size)
    print_table(results, device if device == "cpu" else torch.cuda.get_device_name())
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([asdict(r) for r in results], fh, indent=2)


if __name__ == "__main__":
    main()
