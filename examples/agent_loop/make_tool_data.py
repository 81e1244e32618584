"""Data of the tool-learning recipe (examples/agent_loop/run_tool_learning.sh): multi-digit multiplication, which
a 135M model cannot do in its head but can with the calculator tool.

Writes to ``--out``:

- ``sft.parquet`` (``messages``): the cold-start conversations. Half are hard problems (``--digits``-digit
  factors) solved with a Hermes-style calculator call; the other half are easy one-digit problems answered
  directly. The model thus sees both behaviours, and which one pays on hard problems is left to RL to find.
- ``train.parquet`` / ``test.parquet`` (``prompt``, ``data_source``, ``reward_model.ground_truth``): hard problems
  for GRPO and the held-out evaluation (disjoint from each other and from the SFT problems).

    python examples/agent_loop/make_tool_data.py --out ~/data/tool_mult
"""

from __future__ import annotations

import argparse
import json
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq

DATA_SOURCE = "tool_multiply"
SYSTEM = "You can call a calculator: <tool_call>{json}</tool_call>. End with: The answer is N."


def call_text(a: int, b: int) -> str:
    """The assistant turn that calls the calculator (Hermes format, as the tool agent loop parses it)."""
    payload = {"name": "calculator", "arguments": {"expression": f"{a} * {b}"}}
    return f"<tool_call>{json.dumps(payload)}</tool_call>"


def question(a: int, b: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {a} * {b}?"}]


def hard_pair(rng: random.Random, digits: int) -> tuple[int, int]:
    lo, hi = 10 ** (digits - 1), 10**digits - 1
    return rng.randint(lo, hi), rng.randint(lo, hi)


def sft_rows(pairs: list[tuple[int, int]], rng: random.Random) -> list[dict]:
    rows = []
    for a, b in pairs:
        tool = [
            {"role": "assistant", "content": call_text(a, b)},
            {"role": "tool", "content": str(a * b)},
            {"role": "assistant", "content": f"The answer is {a * b}."},
        ]
        rows.append({"messages": question(a, b) + tool})
        x, y = rng.randint(2, 9), rng.randint(2, 9)
        rows.append({"messages": question(x, y) + [{"role": "assistant", "content": f"The answer is {x * y}."}]})
    rng.shuffle(rows)
    return rows


def rl_rows(pairs: list[tuple[int, int]], split: str) -> list[dict]:
    return [
        {
            "data_source": DATA_SOURCE,
            "prompt": question(a, b),
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(a * b)},
            "extra_info": {"split": split, "index": i},
        }
        for i, (a, b) in enumerate(pairs)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--digits", type=int, default=3)
    parser.add_argument("--n_sft", type=int, default=128, help="hard tool conversations (as many easy ones)")
    parser.add_argument("--n_train", type=int, default=256)
    parser.add_argument("--n_test", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    seen: set[tuple[int, int]] = set()
    pairs: list[tuple[int, int]] = []
    while len(pairs) < args.n_sft + args.n_train + args.n_test:
        pair = hard_pair(rng, args.digits)
        if pair not in seen:
            seen.add(pair)
            pairs.append(pair)
    sft, train, test = (
        pairs[: args.n_sft],
        pairs[args.n_sft : args.n_sft + args.n_train],
        pairs[args.n_sft + args.n_train :],
    )
    os.makedirs(args.out, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(sft_rows(sft, rng)), os.path.join(args.out, "sft.parquet"))
    pq.write_table(pa.Table.from_pylist(rl_rows(train, "train")), os.path.join(args.out, "train.parquet"))
    pq.write_table(pa.Table.from_pylist(rl_rows(test, "test")), os.path.join(args.out, "test.parquet"))
    print(f"wrote {2 * len(sft)} SFT conversations, {len(train)} train and {len(test)} test problems to {args.out}")


if __name__ == "__main__":
    main()
