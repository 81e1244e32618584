"""Load upstream verl's default config as a user's copy of it, then train one step with it.

Users copy upstream's ``verl/trainer/config/_generated_ppo_trainer.yaml`` (every key with its default), or its whole
config directory (``ppo_trainer.yaml`` composed from its groups: ``--whole-dir``), and edit a few values. This checks
that such a copy is accepted as it is, and that it trains once the values a user must give are set
(:data:`USER_VALUES`: model, data, micro-batch sizes, which upstream refuses as null too, and the device)::

    PYTHONPATH=$PWD python scripts/upstream_config_copy.py /work/.mirror/verl-project+verl/repo [--whole-dir] [--step]

``--step`` trains one step as ``scripts/upstream_scripts_step.py`` does (tiny random model, arithmetic task, one
rank, 2 prompts x 2 responses of 8 tokens; :func:`upstream_scripts_step.one_step_args`); ``--gae`` with a critic.
Exit 0 when the copy loads (and trains); otherwise the problems are printed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATED = "verl/trainer/config/_generated_ppo_trainer.yaml"
# upstream's null / placeholder values a user of the copy must set (upstream stops on the micro-batch sizes too)
USER_VALUES = [
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
    "critic.ppo_micro_batch_size_per_gpu=2",
    "critic.forward_micro_batch_size_per_gpu=2",
]


def extract_generated(verl_git_dir: str, out_dir: str) -> str:
    """Write upstream's generated config (at ``HEAD``) to ``<out_dir>/upstream_ppo_trainer.yaml``; its path."""
    text = subprocess.run(
        ["git", "--git-dir", verl_git_dir, "show", f"HEAD:{GENERATED}"], capture_output=True, text=True, check=True
    ).stdout
    path = os.path.join(out_dir, "upstream_ppo_trainer.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def extract_config_dir(verl_git_dir: str, out_dir: str) -> str:
    """Unpack upstream's ``verl/trainer/config`` (at ``HEAD``) under ``out_dir``; returns its ``ppo_trainer.yaml``."""
    archive = subprocess.run(
        ["git", "--git-dir", verl_git_dir, "archive", "HEAD", os.path.dirname(GENERATED)],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", out_dir], input=archive, check=True)
    return os.path.join(out_dir, os.path.dirname(GENERATED), "ppo_trainer.yaml")


def command(config_path: str, overrides: list[str]) -> list[str]:
    """``python -m verl.trainer.main_ppo`` with the copy as the primary config."""
    directory, name = os.path.split(config_path)
    return [sys.executable, "-m", "verl.trainer.main_ppo", f"--config-path={directory}",
            f"--config-name={os.path.splitext(name)[0]}", *overrides]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("verl_git_dir", help="a git directory of upstream verl (e.g. from fetch)")
    parser.add_argument("--step", action="store_true", help="also train one step with the copy")
    parser.add_argument("--gae", action="store_true", help="with a critic (algorithm.adv_estimator=gae)")
    parser.add_argument("--whole-dir", action="store_true", help="upstream's config directory, not the generated file")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from upstream_scripts_step import make_inputs, one_step_args

    env = {**os.environ, "PYTHONPATH": ROOT}
    with tempfile.TemporaryDirectory(prefix="upstream_copy_") as work:
        extract = extract_config_dir if args.whole_dir else extract_generated
        config = extract(args.verl_git_dir, work)
        what = "config directory" if args.whole_dir else GENERATED
        model_dir, data_dir = make_inputs(os.path.join(work, "inputs"))
        own = ["algorithm.adv_estimator=gae", "critic.enable=true"] if args.gae else []
        overrides = [*one_step_args(own, model_dir, data_dir, os.path.join(work, "run"), "hf"), *USER_VALUES,
                     f"critic.model.path={model_dir}", f"critic.model.tokenizer_path={model_dir}"]  # fmt: skip
        if not any(a.startswith("trainer.device=") for a in overrides):
            import torch

            overrides.append(f"trainer.device={'cuda' if torch.cuda.is_available() else 'cpu'}")
        loaded = subprocess.run([*command(config, overrides), "--cfg", "job"], env=env, capture_output=True, text=True)
        if loaded.returncode != 0:
            print(f"the copy of {what} is refused:\n{loaded.stderr.strip()}")
            return 1
        print(f"the copy of {what} loads ({len(loaded.stdout.splitlines())} lines of resolved config)")
        if not args.step:
            return 0
        trained = subprocess.run(command(config, overrides), env=env, capture_output=True, text=True)
        lines = (trained.stdout + trained.stderr).strip().splitlines()
        step = [ln for ln in lines if ln.startswith("step 1 |")]
        print(step[0] if step and trained.returncode == 0 else f"failed (exit {trained.returncode}): {lines[-1:]}")
        return trained.returncode


if __name__ == "__main__":
    sys.exit(main())
