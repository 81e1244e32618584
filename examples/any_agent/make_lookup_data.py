"""Write the locker-code task of ``examples/any_agent/lookup_agent.py`` as verl parquet files: ``train.parquet``
(the first 48 names, three phrasings each) and ``test.parquet`` (the other 12 names, held out: 36 rows).

    python examples/any_agent/make_lookup_data.py OUT_DIR
"""

from __future__ import annotations

import argparse
import importlib.util
import os

import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN_NAMES = 48


def _agent_module():
    spec = importlib.util.spec_from_file_location("lookup_agent", os.path.join(HERE, "lookup_agent.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(split: str) -> list[dict]:
    """The split's rows: ``prompt`` (the user's question), ``extra_info`` (``name``, ``answer`` = the code)."""
    agent = _agent_module()
    names = agent.NAMES[:TRAIN_NAMES] if split == "train" else agent.NAMES[TRAIN_NAMES:]
    out = []
    for name in names:
        for form in range(len(agent.QUESTIONS)):
            text = agent.question(name, form)
            code = str(agent.CODES[name])
            out.append({"data_source": "lookup", "prompt": [{"role": "user", "content": text}], "ability": "tools",
                        "reward_model": {"style": "rule", "ground_truth": code},
                        "extra_info": {"split": split, "index": len(out), "name": name, "answer": code}})  # fmt: skip
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    for split in ("train", "test"):
        path = os.path.join(args.out_dir, f"{split}.parquet")
        pd.DataFrame(rows(split)).to_parquet(path)
        print(path)
