"""``python -m verl.experimental.fully_async_policy.fully_async_main key=value ...`` (verl's path, the same module):
fully asynchronous training.

The PPO trainer's entry point (``python -m verl.trainer.main_ppo``) with upstream v0.9's default config of this
module, ``fully_async_ppo_trainer.yaml`` (``ppo_trainer.yaml`` plus ``async_training.mode=fully_async`` and the
defaults upstream sets for it), unless the command line names a config itself. See docs/async_training.md.
"""

from __future__ import annotations

import sys

from verl.trainer.config.entrypoint import with_default_config
from verl.trainer.main_ppo import main as ppo_main

MODE_OVERRIDE = "async_training.mode=fully_async"
DEFAULT_CONFIG = "fully_async_ppo_trainer"


def main(argv: list[str] | None = None) -> int:
    """Run fully asynchronous PPO/GRPO from command-line arguments; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    return ppo_main([*with_default_config(args, DEFAULT_CONFIG), MODE_OVERRIDE, *args])


if __name__ == "__main__":
    sys.exit(main())
