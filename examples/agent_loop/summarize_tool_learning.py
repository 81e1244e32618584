"""The table of the tool-learning recipe: held-out accuracy and tool calls per problem of the base model, after SFT
and after GRPO, read from the validation metrics the runs of run_tool_learning.sh logged (``metrics.jsonl``).

    python examples/agent_loop/summarize_tool_learning.py outputs/tool_learning
"""

from __future__ import annotations

import glob
import json
import os
import sys

ACCURACY = "val-core/tool_multiply/reward/mean@1"
CALLS = "val-agent/tool_calls/mean"


def validations(run_dir: str) -> list[dict]:
    """The validation records of a run, in order (records holding the accuracy key)."""
    paths = glob.glob(os.path.join(run_dir, "**", "metrics.jsonl"), recursive=True)
    if not paths:
        raise FileNotFoundError(f"no metrics.jsonl under {run_dir} (did the run log with trainer.logger=[...,file]?)")
    rows = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for record in map(json.loads, filter(str.strip, f)):  # {"step": n, "metrics": {...}}
                if ACCURACY in record.get("metrics", {}):
                    rows.append({"step": record.get("step", 0), **record["metrics"]})
    if not rows:
        raise ValueError(f"{run_dir}: no validation record with {ACCURACY}")
    return sorted(rows, key=lambda r: r.get("step", 0))


def main(out: str) -> None:
    base = validations(os.path.join(out, "base"))[-1]
    grpo = validations(os.path.join(out, "grpo"))
    stages = [("base model", base), ("after SFT", grpo[0]), (f"after GRPO (step {grpo[-1].get('step')})", grpo[-1])]
    print("| stage | held-out accuracy | tool calls per problem |\n|---|---|---|")
    for name, row in stages:
        print(f"| {name} | {row[ACCURACY]:.3f} | {row.get(CALLS, float('nan')):.3f} |")


if __name__ == "__main__":
    main(sys.argv[1])
