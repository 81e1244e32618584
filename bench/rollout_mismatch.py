"""The rollout-vs-trainer log-prob gap on the bundled model: ``rollout_corr/*`` metrics of a few demo GRPO steps.

Runs the embedded demo (bundled SmolLM2-135M-Instruct, arithmetic prompts) with
``actor_rollout_ref.rollout.calculate_log_probs=true`` and the old-log-prob pass forced on, for each rollout engine
and rollout dtype asked for, and reports the per-step mismatch metrics the driver logs (k1/k3 KL, perplexity ratio,
chi-square, token-weight range). The correction itself stays off, so the figures are the raw gap.
Results: ``bench/results/rollout_mismatch_<engines>_<machine>.json``.

    python bench/rollout_mismatch.py                          # hf engine (actor dtype), and vllm when importable
    python bench/rollout_mismatch.py --engines hf --rollout-dtypes float32 bfloat16 --steps 2
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import markdown_table, save_result  # noqa: E402

KEYS = ("kl", "k3_kl", "ppl_ratio", "log_ppl_abs_diff", "chi2_token", "chi2_seq")


def run_case(engine: str, rollout_dtype: str | None, steps: int) -> dict:
    """``steps`` demo steps with ``engine``; returns the logged ``rollout_corr/*`` metrics of each step."""
    from verl.trainer.config import load_config
    from verl.trainer.ppo.runner import run_ppo

    with tempfile.TemporaryDirectory() as out:
        overrides = [
            f"actor_rollout_ref.rollout.name={engine}",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "actor_rollout_ref.actor.skip_old_log_prob_on_policy=false",
            f"trainer.total_training_steps={steps}",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=0",
            "trainer.logger=[file]",
            "trainer.export_hf=false",
            "trainer.plot=false",
            f"trainer.default_local_dir={out}",
        ]
        if rollout_dtype is not None:
            overrides.append(f"actor_rollout_ref.rollout.dtype={rollout_dtype}")
        cfg = load_config(overrides)
        start = time.perf_counter()
        run_ppo(cfg)
        wall = time.perf_counter() - start
        lines = (Path(out) / "logs" / "metrics.jsonl").read_text().splitlines()
        records = [json.loads(line)["metrics"] for line in lines]
        records = [r for r in records if "rollout_corr/kl" in r]
        return {
            "engine": engine,
            "actor_dtype": str(cfg.actor_rollout_ref.actor.dtype),
            "rollout_dtype": str(cfg.actor_rollout_ref.rollout.dtype),
            "wall_s": round(wall, 1),
            "steps": [{k: v for k, v in r.items() if k.startswith("rollout_corr/")} for r in records],
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", nargs="+", default=None, help="hf, vllm (default: hf, and vllm if importable)")
    parser.add_argument("--rollout-dtypes", nargs="+", default=[None], help="rollout.dtype values (default: YAML's)")
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    engines = args.engines
    if engines is None:
        engines = ["hf"]
        try:
            import vllm  # noqa: F401

            engines.append("vllm")
        except ImportError:
            pass
    cases = []
    for engine in engines:
        for dtype in args.rollout_dtypes:
            try:
                cases.append(run_case(engine, dtype, args.steps))
            except Exception as err:  # an engine this machine cannot run is reported, not fatal to the others
                cases.append({"engine": engine, "rollout_dtype": dtype, "error": f"{type(err).__name__}: {err}"})
    rows = []
    for case in cases:
        if "error" in case:
            rows.append([case["engine"], case["rollout_dtype"], "-", case["error"][:60], *[""] * (len(KEYS) - 1)])
            continue
        for i, step in enumerate(case["steps"], 1):
            rows.append(
                [case["engine"], f"{case['actor_dtype']}/{case['rollout_dtype']}", i]
                + [f"{step[f'rollout_corr/{k}']:.3g}" for k in KEYS]
            )
    print(markdown_table(["engine", "actor/rollout dtype", "step", *KEYS], rows))
    print(save_result(f"rollout_mismatch_{'_'.join(engines)}", {"cases": cases}, per_machine=True))


if __name__ == "__main__":
    main()
