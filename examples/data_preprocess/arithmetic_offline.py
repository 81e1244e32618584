"""Write SFT, DPO and KTO datasets for the bundled arithmetic task (two-number addition).

SFT rows {prompt, response, extra_info: {question, answer}}: the correct answer (extra_info as verl's gsm8k
preprocessing writes it); the same as conversations {messages: [..., {assistant: answer}]} in sft_messages_*.parquet
(the layout of verl v0.9's gsm8k_multiturn_sft.py, read by `python -m verl.trainer.sft_trainer`).
DPO rows {prompt, chosen, rejected}: the correct answer against a near miss (off by 1..10).
KTO rows {prompt, completion, label}: half correct (desirable), half near misses.
Prompts are chat messages, as in the RL data, so the trainers apply the model's chat template.

    python examples/data_preprocess/arithmetic_offline.py --local_dir ~/data/arithmetic_offline
"""

from __future__ import annotations

import argparse
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq

from verl.data.arithmetic_task import generate_arithmetic_rows


def _near_miss(answer: int, rng: random.Random) -> int:
    wrong = answer
    while wrong == answer or wrong < 0:
        wrong = answer + rng.choice([-1, 1]) * rng.randint(1, 10)
    return wrong


def build_offline_rows(num_rows: int, seed: int, split: str) -> dict[str, list[dict]]:
    """SFT (prompt/response and conversation), DPO and KTO rows from the same arithmetic problems (deterministic for
    a seed)."""
    rng = random.Random(seed)
    sft, sft_messages, dpo, kto = [], [], [], []
    for i, row in enumerate(generate_arithmetic_rows(num_rows, seed=seed, split=split)):
        prompt = row["prompt"]
        answer = int(row["reward_model"]["ground_truth"])
        wrong = _near_miss(answer, rng)
        # extra_info mirrors verl's gsm8k preprocessing, read by verl-style SFT scripts through data.*_dict_keys
        question = prompt[-1]["content"] if isinstance(prompt, list) else str(prompt)
        extra_info = {"question": question, "answer": str(answer)}
        sft.append({"prompt": prompt, "response": str(answer), "extra_info": extra_info})
        user = prompt if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
        sft_messages.append({"messages": [*user, {"role": "assistant", "content": str(answer)}]})
        dpo.append({"prompt": prompt, "chosen": str(answer), "rejected": str(wrong)})
        desirable = i % 2 == 0
        kto.append({"prompt": prompt, "completion": str(answer if desirable else wrong), "label": desirable})
    return {"sft": sft, "sft_messages": sft_messages, "dpo": dpo, "kto": kto}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local_dir", default="~/data/arithmetic_offline")
    parser.add_argument("--train_size", type=int, default=2000)
    parser.add_argument("--test_size", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = os.path.expanduser(args.local_dir)
    os.makedirs(out, exist_ok=True)
    for split, size, seed in (("train", args.train_size, args.seed), ("test", args.test_size, args.seed + 1)):
        for kind, rows in build_offline_rows(size, seed, split).items():
            path = os.path.join(out, f"{kind}_{split}.parquet")
            pq.write_table(pa.Table.from_pylist(rows), path)
            print(f"wrote {len(rows)} rows to {path}")


if __name__ == "__main__":
    main()
