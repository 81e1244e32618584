"""``python -m verl.experimental.fully_async_policy.fully_async_main key=value ...`` (verl's path, the same module):
fully asynchronous training.

The PPO trainer's config and entry point (``verl/trainer/config/ppo_trainer.yaml``, ``python -m
verl.trainer.main_ppo``) with ``async_training.mode=fully_async`` set first, so a later ``async_training.*`` override
on the command line still applies. See docs/async_training.md.
"""

from __future__ import annotations

import sys

from verl.trainer.main_ppo import main as ppo_main

MODE_OVERRIDE = "async_training.mode=fully_async"


def main(argv: list[str] | None = None) -> int:
    """Run fully asynchronous PPO/GRPO from command-line arguments; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    return ppo_main([MODE_OVERRIDE, *args])


if __name__ == "__main__":
    sys.exit(main())
