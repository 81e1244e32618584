"""``python -m verl.trainer.main_generation_server``: upstream v0.9's rollout-only generation, refused in one line.

Upstream (``verl/trainer/main_generation_server.py``) starts standalone vLLM servers from the PPO config and writes
the prompts' parquet back with a ``responses`` column (``rollout.n`` chat completions per prompt). This project has
no standalone rollout server; ``python -m verl.trainer.main_eval`` generates ``rollout.n`` responses per prompt of a
parquet with a model (``output.generations_path`` keeps them) and scores them. The module exists so that upstream's
launch scripts get that one line (exit 2) rather than an import error.
"""

from __future__ import annotations

import sys

PROG = "python -m verl.trainer.main_generation_server"
REFUSAL = (
    "verl.trainer.main_generation_server (standalone vLLM servers writing a parquet of responses) is not implemented "
    "here; use python -m verl.trainer.main_eval data.path=<prompts.parquet> model.path=<model> rollout.n=<N> "
    "output.generations_path=<out.parquet>"
)


def main(argv: list[str] | None = None) -> int:
    """Print the one-line refusal (whatever ``argv`` holds) and return exit code 2, as a refused config does."""
    print(f"{PROG}: {REFUSAL}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
