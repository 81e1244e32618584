"""Run every benchmark in turn (``make bench``), or a one-step smoke of each (``make bench-smoke``).

Each script runs in its own subprocess with the same interpreter; results land in ``bench/results/`` (smoke runs
in ``bench/results/smoke/``). The learning curve takes up to an hour and is left out of the full run unless
``--with-learning`` is given (start it on its own: ``python bench/learning.py``).

    python bench/run_all.py --smoke
    python bench/run_all.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = [
    "limits.py",
    "scaling.py",
    "grpo_vs_trl.py",
    "rollout_overhead.py",
    "logprob_memory.py",
    "packing.py",
    "demo_time.py",
]
# the GPU-speed scripts (docs/benchmarks.md sections 8-9): their full shapes are GPU work, so a full run on a
# machine without CUDA leaves them out; the smoke run always includes them
GPU_SCRIPTS = ["gpu_grpo_vs_trl.py", "decode_speed.py", "train_compile.py"]


def run(script: str, extra: list[str]) -> tuple[int, float]:
    """Run ``bench/<script> <extra>``; returns (exit code, seconds)."""
    start = time.perf_counter()
    code = subprocess.call([sys.executable, os.path.join(BENCH_DIR, script), *extra])
    return code, time.perf_counter() - start


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="one short step of each script")
    parser.add_argument("--with-learning", action="store_true", help="also run the (hour-long) learning curve")
    parser.add_argument("--only", default="", help="comma-separated script names to run (default: all)")
    args = parser.parse_args(argv)
    scripts = list(SCRIPTS)
    if args.smoke or _has_cuda():
        scripts += GPU_SCRIPTS
    if args.with_learning or args.smoke:
        scripts.append("learning.py")
    if args.only:
        wanted = {s if s.endswith(".py") else f"{s}.py" for s in args.only.split(",")}
        scripts = [s for s in scripts if s in wanted]
    failures = []
    for script in scripts:
        extra = ["--smoke"] if args.smoke else []
        if script == "rollout_overhead.py" and not args.smoke:
            extra = ["--engines", "hf"]  # vLLM's CPU engine start-up alone takes minutes on 2 cores
        print(f"== {script} {' '.join(extra)}", flush=True)
        code, seconds = run(script, extra)
        print(f"== {script}: exit {code} in {seconds:.0f} s", flush=True)
        if code != 0:
            failures.append(script)
    if failures:
        sys.exit(f"failed: {', '.join(failures)}")


if __name__ == "__main__":
    main()
