"""How long `make demo` takes on this machine, model conversion included, and what it learns.

Runs ``python -m verl.trainer.main_ppo`` (the embedded demo: no data given) in a fresh working directory with an
empty verl model cache, so the bundled GGUF is converted as on a fresh machine, and records the wall time of the
whole run, the conversion, the validation accuracy before and after training, and the CPU kind (``dtype: auto``
picks bf16 only where the CPU multiplies it natively). Results: ``bench/results/demo_time_<kind>.json``.

    python bench/demo_time.py                     # this machine as it is
    ATEN_CPU_CAPABILITY=avx2 DNNL_MAX_CPU_ISA=AVX2 python bench/demo_time.py   # approximate an AVX2-only CPU
    python bench/demo_time.py --smoke             # 1 step of 2 prompts x 2, 4 validation rows, cached model (CI)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import save_result  # noqa: E402

VAL_RE = re.compile(r"validation (before|after) training \(step (\d+)\): .*?mean@1 = ([0-9.]+)")


CONVERT = "from verl.models.loader import resolve_model_path as r; r('smollm2-135m-instruct')"


def run_demo(extra: list[str], cache_dir: str | None, workdir: str) -> dict:
    """Run the demo once; returns wall seconds, conversion seconds, accuracies and the tail of the output.

    ``cache_dir``: an empty verl cache (the bundled model is converted as on a fresh machine), or None for the
    user's cache."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if cache_dir is not None:
        env["VERL_CACHE_DIR"] = cache_dir
    start = time.perf_counter()
    convert = subprocess.run(
        [sys.executable, "-c", CONVERT],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
    )
    convert_s = time.perf_counter() - start
    if convert.returncode != 0:
        raise RuntimeError(f"model conversion failed:\n{convert.stderr[-3000:]}")
    proc = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", *extra],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
    )
    wall_s = time.perf_counter() - start
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"demo failed (exit {proc.returncode}):\n{out[-3000:]}")
    acc = {m.group(1): (int(m.group(2)), float(m.group(3))) for m in VAL_RE.finditer(out)}
    metrics = Path(workdir, "outputs/verl/demo/logs/metrics.jsonl")
    steps = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    step_s = [r["metrics"]["timing_s/step"] for r in steps if "timing_s/step" in r.get("metrics", {})]
    return {
        "wall_s": round(wall_s, 1),
        "convert_s": round(convert_s, 1),
        "accuracy_before": acc.get("before", (0, None))[1],
        "accuracy_after": acc.get("after", (0, None))[1],
        "steps": acc.get("after", (0, None))[0],
        "median_step_s": sorted(step_s)[len(step_s) // 2] if step_s else None,
        "console_lines": len(out.splitlines()),
        # the largest child so far: the demo process (the conversion child is far smaller)
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2, 2),
        "output_tail": out.splitlines()[-8:],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--smoke", action="store_true", help="1 step of 2 prompts x 2, 4 validation rows, the user's model cache"
    )
    parser.add_argument("overrides", nargs="*", help="extra key=value overrides for the demo")
    args = parser.parse_args(argv)
    extra = list(args.overrides)
    if args.smoke:
        extra += ["trainer.total_training_steps=1", "trainer.test_freq=1", "data.val_max_samples=4"]
        # the script is under test, not the demo's step size: 2 prompts x 2 responses instead of 8 x 4
        extra += ["data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2"]
        extra += ["actor_rollout_ref.rollout.n=2"]
        extra += ["actor_rollout_ref.rollout.name=hf"]  # the script is under test here, not the engine start-up
    with tempfile.TemporaryDirectory(prefix="verl_demo_time_") as root:
        cache, work = os.path.join(root, "cache"), os.path.join(root, "work")
        os.makedirs(work)
        result = run_demo(extra, None if args.smoke else cache, work)
    path = save_result("demo_time", {"overrides": extra, **result}, smoke=args.smoke, per_machine=True)
    print(json.dumps({k: v for k, v in result.items() if k != "output_tail"}))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
