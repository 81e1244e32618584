"""The ``verl`` console script: one command with a subcommand per entry point.

``verl ppo key=value ...`` is ``python -m verl.trainer.main_ppo key=value ...``; likewise ``sft``, ``dpo``,
``kto``, ``gkd``, ``eval``, ``merge``, ``serve``, ``report`` and ``compare``. Each subcommand forwards the rest of
the command line untouched to its module's ``main(argv) -> int``. ``verl config [TRAINER]`` prints a trainer's
packaged defaults, ``verl version`` the version.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass

from verl.version import __version__

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 1
# third-party modules that only an optional extra installs (pyproject.toml), for the hint when one is missing
EXTRA_OF_MODULE = {"fastapi": "serve", "uvicorn": "serve", "gguf": "bundled", "datasets": "data", "vllm": "vllm"}


@dataclass(frozen=True)
class Subcommand:
    """A forwarding subcommand: ``module.main(argv)`` runs it; ``config_name`` is its packaged YAML, if any."""

    module: str
    help: str
    config_name: str | None = None


SUBCOMMANDS: dict[str, Subcommand] = {
    "ppo": Subcommand("verl.trainer.main_ppo", "PPO / GRPO and relatives (RL with a reward)", "ppo_trainer"),
    "sft": Subcommand("verl.trainer.main_sft", "supervised fine-tuning", "sft_trainer"),
    "dpo": Subcommand("verl.trainer.main_dpo", "direct preference optimisation", "dpo_trainer"),
    "kto": Subcommand("verl.trainer.main_kto", "Kahneman-Tversky optimisation", "kto_trainer"),
    "gkd": Subcommand("verl.trainer.main_gkd", "on-policy distillation from a teacher (GKD)", "gkd_trainer"),
    "eval": Subcommand("verl.trainer.main_eval", "score generated responses / evaluate a model"),
    "merge": Subcommand("verl.model_merger", "turn a training checkpoint into a Hugging Face model directory"),
    "serve": Subcommand("verl.serve", "serve a model over HTTP (FastAPI: /generate, OpenAI /v1/...)"),
    "report": Subcommand("verl.reporting.report", "rebuild report.html of a run directory: verl report RUN_DIR"),
    "compare": Subcommand(
        "verl.reporting.report.compare", "compare runs on one HTML page: verl compare RUN_DIR RUN_DIR [...]"
    ),
}


def _usage() -> str:
    width = max(len(n) for n in [*SUBCOMMANDS, "version", "config"])
    lines = [
        "usage: verl <command> [args ...]",
        "",
        "RL post-training of LLMs (verl key names). Commands:",
    ]
    for name, sub in SUBCOMMANDS.items():
        lines.append(f"  {name:<{width}}  {sub.help} ({sub.module})")
    lines.append(f"  {'config':<{width}}  print the default config of a trainer: verl config [ppo|sft|dpo|kto|gkd]")
    lines.append(f"  {'version':<{width}}  print the verl version")
    lines += [
        "",
        "'verl <command> --help' shows the options of a command; e.g. verl ppo --cfg job data.train_batch_size=32",
    ]
    return "\n".join(lines)


def resolve_main(module_name: str) -> Callable[[list[str]], int]:
    """Import ``module_name`` and return its ``main(argv)`` (a package may keep it in its ``__main__``).

    Raises:
        LookupError: naming the module, when it is not installed or has no ``main``.
    """
    if importlib.util.find_spec(module_name) is None:
        raise LookupError(f"{module_name} is not available in this installation (not installed or not built yet)")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:  # the module exists but needs something that is not installed
        extra = EXTRA_OF_MODULE.get((e.name or "").split(".")[0])
        hint = f"install the '{extra}' extra: pip install 'verl[{extra}]'" if extra else "is an optional extra missing?"
        raise LookupError(f"{module_name} cannot be imported: {e} ({hint})") from e
    main_fn = getattr(module, "main", None)
    if main_fn is None and _is_package(module) and importlib.util.find_spec(f"{module_name}.__main__") is not None:
        main_fn = getattr(importlib.import_module(f"{module_name}.__main__"), "main", None)
    if not callable(main_fn):
        raise LookupError(f"{module_name} has no main(argv) entry point")
    return main_fn


def _is_package(module: object) -> bool:
    return hasattr(module, "__path__")


def _config_command(argv: list[str]) -> int:
    """``verl config [TRAINER] [--resolved] [key=value ...]``: the packaged defaults (with comments) or resolved."""
    from verl.trainer.config.loader import config_to_yaml, load_config, packaged_config_text
    from verl.utils.errors import ConfigError

    trainers = {name: sub.config_name for name, sub in SUBCOMMANDS.items() if sub.config_name}
    parser = argparse.ArgumentParser(prog="verl config", description="Print the default config of a trainer.")
    parser.add_argument("trainer", nargs="?", default="ppo", choices=sorted(trainers), help="which trainer")
    parser.add_argument(
        "--resolved", action="store_true", help="print the resolved config (interpolations filled, overrides applied)"
    )
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="overrides (with --resolved)")
    try:
        args = parser.parse_intermixed_args(argv)
    except SystemExit as e:
        return int(e.code) if isinstance(e.code, int) else EXIT_USAGE
    name = trainers[args.trainer]
    try:
        if args.resolved or args.overrides:
            text = config_to_yaml(load_config(args.overrides, config_name=name, schema=None))
        else:
            text = packaged_config_text(name)
    except ConfigError as e:
        print("verl config: " + "\n".join(e.problems), file=sys.stderr)
        return EXIT_USAGE if args.overrides else EXIT_UNAVAILABLE
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``verl <command> [args ...]`` (``sys.argv[1:]`` when ``argv`` is None); returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else EXIT_USAGE
    command, rest = args[0], args[1:]
    if command in ("version", "--version", "-V"):
        print(f"verl {__version__}")
        return 0
    if command == "config":
        return _config_command(rest)
    sub = SUBCOMMANDS.get(command)
    if sub is None:
        import difflib

        close = difflib.get_close_matches(command, [*SUBCOMMANDS, "config", "version"], n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        print(f"verl: unknown command {command!r}{hint}\n\n{_usage()}", file=sys.stderr)
        return EXIT_USAGE
    try:
        main_fn = resolve_main(sub.module)
    except LookupError as e:
        print(f"verl {command}: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    code = main_fn(rest)
    return int(code) if code is not None else 0


if __name__ == "__main__":
    sys.exit(main())
