"""Chaos resume benchmark: many kill -9 at random steps and points of a run, in every trainer mode, compared with
the uninterrupted run.

For each mode (``verl.trainer.ppo.kill_resume.RESUME_MODES``: synchronous, multi-turn agent loops, LoRA, fully
asynchronous at staleness 0, one-step-off, fully asynchronous at staleness 1 with partial rollouts) it

1. trains the tiny GRPO run of ``--steps`` steps once without interruption (in a child process, like the others);
2. trains it again in the same way, but ``--kills`` times a child process SIGKILLs itself at a random step and one
   of the points ``rollout`` / ``update`` / ``save`` (inside a checkpoint save) / ``after`` (after the step), each
   time followed by the same command, which resumes (``trainer.resume_mode=auto``); checkpoints every
   ``--save-freq`` steps, so a kill between two saves loses steps that run again;
3. compares the ends: the consumed prompt indices (data ledger of the final checkpoint: no prompt lost or repeated,
   same order), the weights and optimizer state (bit for bit, expected where the schedule is deterministic), and the
   logged steps (``metrics.jsonl``: each step exactly once).

Prints a markdown table and writes ``bench/results/chaos_resume.json``. Usage::

    python bench/chaos_resume.py --steps 12 --kills 4
    python bench/chaos_resume.py --modes sync one_step_off --steps 30 --kills 10 --seed 1
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import machine_info  # noqa: E402
from verl.checkpoint.layout import get_checkpoint_step, newest_complete_step_dir  # noqa: E402
from verl.trainer.ppo.kill_resume import (  # noqa: E402
    KILL_POINTS,
    RESUME_MODES,
    final_state,
    run_killed,
    tiny_run_overrides,
)

REWARD_SOURCE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return sum(1 for ch in solution_str if ch.isdigit()) / max(len(solution_str), 1)
"""
RESULTS = Path(__file__).resolve().parent / "results" / "chaos_resume.json"


def _logged_steps(out: str) -> list[int]:
    path = Path(out) / "logs" / "metrics.jsonl"
    return [int(json.loads(line)["step"]) for line in path.read_text().splitlines()]


def _kill_plan(rng: random.Random, steps: int, kills: int, save_freq: int) -> list[tuple[int, str]]:
    """``kills`` (step, point) pairs at distinct steps in increasing order; ``save`` only at a saving step."""
    chosen = sorted(rng.sample(range(1, steps + 1), min(kills, steps)))
    plan = []
    for step in chosen:
        points = [p for p in KILL_POINTS if p != "save" or step % save_freq == 0 or step == steps]
        plan.append((step, rng.choice(points)))
    return plan


def chaos_mode(mode: str, work: str, files: dict[str, str], args: argparse.Namespace, rng: random.Random) -> dict:
    """One mode: the uninterrupted run, the killed-and-resumed run, and their comparison."""
    full_out, cut_out = os.path.join(work, mode, "full"), os.path.join(work, mode, "chaos")

    def overrides(out: str) -> list[str]:
        return tiny_run_overrides(
            files["model"], files["train"], files["reward"], out, mode, args.steps, save_freq=args.save_freq
        )

    start = time.perf_counter()
    code = run_killed(overrides(full_out), step=None)
    if code != 0:
        raise RuntimeError(f"{mode}: the uninterrupted run failed (exit {code})")
    full_s = time.perf_counter() - start
    plan = _kill_plan(rng, args.steps, args.kills, args.save_freq)
    start = time.perf_counter()
    redone = 0
    for step, point in plan:
        code = run_killed(overrides(cut_out), step=step, point=point)
        if code != -9:
            raise RuntimeError(f"{mode}: the child meant to die at step {step} ({point}) exited with {code}")
        saved_dir = newest_complete_step_dir(cut_out)  # None: killed before the first checkpoint
        saved = get_checkpoint_step(saved_dir) if saved_dir else 0
        redone += step - saved  # steps saved+1..step ran (step itself at least in part) and run again
    code = run_killed(overrides(cut_out), step=None)
    if code != 0:
        raise RuntimeError(f"{mode}: the final resume failed (exit {code})")
    chaos_s = time.perf_counter() - start
    full, chaos = final_state(full_out), final_state(cut_out)
    logged = _logged_steps(cut_out)
    return {
        "mode": mode,
        "deterministic": RESUME_MODES[mode][1],
        "steps": args.steps,
        "kills": [{"step": s, "point": p} for s, p in plan],
        "steps_redone": redone,
        "final_step": chaos["step"],
        "same_data_order": chaos["indices"] == full["indices"],
        "samples": len(full["indices"]),
        "bit_identical": chaos["digest"] == full["digest"],
        "each_step_logged_once": logged == list(range(1, args.steps + 1)),
        "uninterrupted_s": round(full_s, 1),
        "chaos_s": round(chaos_s, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", default=list(RESUME_MODES), choices=list(RESUME_MODES))
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--kills", type=int, default=4, help="kills per mode (at distinct random steps)")
    parser.add_argument("--save-freq", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
    from verl.models.tiny import make_tiny_model_dir

    rows_needed = args.steps  # 2 prompts a step over 2 epochs: the run crosses an epoch boundary
    rows = []
    with tempfile.TemporaryDirectory(prefix="chaos_resume_") as work:
        train, _ = generate_arithmetic_splits(train_size=max(rows_needed, 4), test_size=2, seed=3)
        files = {
            "model": make_tiny_model_dir(os.path.join(work, "model")),
            "train": os.path.join(work, "train.parquet"),
        }
        write_parquet(train, files["train"])
        files["reward"] = os.path.join(work, "reward.py")
        Path(files["reward"]).write_text(REWARD_SOURCE)
        for mode in args.modes:
            row = chaos_mode(mode, work, files, args, rng)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print()
    header = [
        "mode",
        "steps",
        "kills (step:point)",
        "steps redone",
        "data order identical",
        "weights bit-identical",
        "each step logged once",
        "uninterrupted s",
        "with kills s",
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for r in rows:
        points = ", ".join(f"{k['step']}:{k['point']}" for k in r["kills"])
        bits = "yes" if r["bit_identical"] else ("no (expected)" if not r["deterministic"] else "**NO**")
        print(
            f"| {r['mode']} | {r['steps']} | {len(r['kills'])} ({points}) | {r['steps_redone']} | "
            f"{'yes' if r['same_data_order'] else '**NO**'} ({r['samples']} samples) | {bits} | "
            f"{'yes' if r['each_step_logged_once'] else '**NO**'} | {r['uninterrupted_s']} | {r['chaos_s']} |"
        )
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"machine": machine_info(), "argv": sys.argv, "rows": rows}, f, indent=2)
    bad = [r["mode"] for r in rows if not r["same_data_order"] or not r["each_step_logged_once"]]
    bad += [r["mode"] for r in rows if r["deterministic"] and not r["bit_identical"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
