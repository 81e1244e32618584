"""Kill -9 a PPO run at a chosen point and read what a run ended with: the harness of the resume tests and of
``bench/chaos_resume.py``.

:func:`run_killed` starts ``python -m verl.trainer.ppo.kill_resume`` on a list of config overrides; the child runs
:func:`~verl.trainer.ppo.runner.run_ppo` and sends itself ``SIGKILL`` (no ``finally``, no flush, no clean-up: what
the kernel's OOM killer or a preempted node does) when step ``k`` reaches one of these points:

============  ===============================================================================================
``rollout``   the step's rollout stage starts (generation of step ``k`` lost)
``update``    the step's update stage starts (rollouts generated, weights not yet updated)
``save``      inside the checkpoint save of step ``k``: the workers' files are written, ``data.pt`` is not (a
              temporary directory is left behind; needs a save at step ``k``)
``after``     after step ``k`` is logged (and saved, when due)
============  ===============================================================================================

:func:`final_state` reads the newest complete checkpoint of a run: its step, a digest of the trained weights and
optimizer state (from the checksums of ``checkpoint_complete.json``), and the consumed prompt indices of its data
ledger (:mod:`verl.trainer.ppo.resume_check`).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import signal
import subprocess
import sys
from typing import Any

import torch

__all__ = ["KILL_POINTS", "RESUME_MODES", "final_state", "run_killed", "tiny_run_overrides", "weights_digest"]

KILL_POINTS = ("rollout", "update", "save", "after")
# The trainer modes whose resume is tested (tests/trainer/ppo/test_resume_modes.py, bench/chaos_resume.py), as config
# overrides, and whether their schedule is deterministic (then a resumed run's weights equal an uninterrupted run's)
RESUME_MODES: dict[str, tuple[list[str], bool]] = {
    "sync": ([], True),
    "multi_turn": (
        [
            "data.return_raw_chat=true",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
            "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
        ],
        # which turn requests share an engine call (and so their sampling draws) depends on timing: the request
        # server batches what is waiting, so only the data order is guaranteed (bit-identical when unloaded)
        False,
    ),
    "lora": (
        [
            "actor_rollout_ref.model.lora_rank=4",
            "actor_rollout_ref.model.lora_alpha=8",
            "actor_rollout_ref.model.target_modules=all-linear",
        ],
        True,
    ),
    # SPIN's online DPO with the reference refreshed every 2 steps: a resume between refreshes needs the refreshed
    # reference from the checkpoint, not the initial model
    "online_dpo_ref2": (
        ["actor_rollout_ref.actor.policy_loss.loss_mode=online_dpo", "trainer.ref_update_freq=2"],
        True,
    ),
    # FlowRL: its log Z head (weights, Adam moments, the dropout's draws) resumes with the policy
    "flowrl": (["actor_rollout_ref.actor.policy_loss.loss_mode=flowrl"], True),
    # SPO: the prompt values and last responses (the discount's drift) resume with the policy; each step draws its
    # prompts out of a loader batch twice its size (grpo becomes spo; rewards must lie in [0, 1])
    "spo": (["algorithm.spo.enable=true", "data.gen_batch_size=4"], True),
    # synchronous partial rollouts: the checkpoint holds the pool's unfinished responses, continued after the resume
    "partial_rollout": (
        [
            "async_training.partial_rollout=true",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "algorithm.rollout_correction.rollout_is=token",
        ],
        True,
    ),
    "fully_async_s0": (["async_training.mode=fully_async", "async_training.staleness_threshold=0"], True),
    "one_step_off": (["async_training.mode=one_step_off"], False),
    "fully_async_s1": (
        [
            "async_training.mode=fully_async",
            "async_training.staleness_threshold=1",
            "async_training.partial_rollout=true",
        ],
        False,
    ),
}
# files of a checkpoint that hold trained state (weights, optimizer moments); not tokenizer / config copies
_TRAINED_PREFIXES = ("model_", "optim_", "adapter_")


def run_killed(
    overrides: list[str], step: int | None, point: str = "after", timeout_s: float = 600.0, fork: bool = False
) -> int:
    """Run PPO with ``overrides`` in a child process killed with SIGKILL at ``point`` of step ``step`` (None: not
    killed); returns the child's exit code (``-9`` when killed, 0 when the run finished first, 1 when it failed).

    ``fork=False`` starts a fresh interpreter (``python -m verl.trainer.ppo.kill_resume``, as a relaunched job
    would be); ``fork=True`` forks this process, which has its imports done already (seconds instead of tens of
    seconds on a loaded machine: the tests use it; the caller must hold no threads or process groups a fork breaks).
    """
    if point not in KILL_POINTS:
        raise ValueError(f"kill point {point!r}: one of {KILL_POINTS}")
    if fork:
        return _run_forked(overrides, step, point, timeout_s)
    cmd = [sys.executable, "-m", "verl.trainer.ppo.kill_resume", "--overrides", json.dumps(overrides)]
    if step is not None:
        cmd += ["--step", str(step), "--point", point]
    return subprocess.run(cmd, timeout=timeout_s, check=False).returncode


def _run_forked(overrides: list[str], step: int | None, point: str, timeout_s: float) -> int:
    import time

    # Objects the parent no longer reaches but has not collected (a test's gloo process group) must die here, where
    # their threads exist: a child that collected one would wait forever on a thread it does not have.
    gc.collect()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's code
        gc.freeze()  # nor does the child's collector ever look at what it inherited
        code = 1
        try:
            from verl.trainer.config import load_config
            from verl.trainer.ppo.runner import run_ppo

            if step is not None:
                _install_kill(step, point)
            run_ppo(load_config(overrides))
            code = 0
        except BaseException:  # noqa: BLE001 - reported by the exit code, the traceback printed
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise subprocess.TimeoutExpired(f"forked PPO run (pid {pid})", timeout_s)
        time.sleep(0.05)


def tiny_run_overrides(
    model: str, train_file: str, reward_file: str, out: str, mode: str, steps: int, save_freq: int = 1
) -> list[str]:
    """A GRPO run of ``steps`` steps on a tiny model (2 prompts x 2 responses of 4 tokens a step, fp32, the hf
    engine, seeded sampling, 2 epochs of data at most) in ``mode`` (a key of :data:`RESUME_MODES`), checkpointing
    every ``save_freq`` steps into ``out`` and resuming from there (``resume_mode=auto``)."""
    return [
        f"actor_rollout_ref.model.path={model}",
        f"data.train_files={train_file}",
        f"custom_reward_function.path={reward_file}",
        "algorithm.adv_estimator=grpo",
        "data.train_batch_size=2",
        "data.max_prompt_length=128",
        "data.max_response_length=4",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.seed=5",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.dtype=float32",
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.actor.optim.lr=1e-2",
        f"trainer.total_training_steps={steps}",
        "trainer.total_epochs=2",
        "trainer.torch_threads=1",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        f"trainer.save_freq={save_freq}",
        "trainer.max_actor_ckpt_to_keep=2",
        "trainer.logger=[file]",
        "trainer.export_hf=false",
        "trainer.plot=false",
        "trainer.report.enable=false",
        "trainer.resume_mode=auto",
        f"trainer.default_local_dir={out}",
        *RESUME_MODES[mode][0],
    ]


def _install_kill(step: int, point: str) -> None:
    """Patch the driver so that this process SIGKILLs itself at ``point`` of step ``step``."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    def die() -> None:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    def before(name: str) -> None:
        real = getattr(RayPPOTrainer, name)

        def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
            if self.global_steps == step:
                die()
            return real(self, *args, **kwargs)

        setattr(RayPPOTrainer, name, wrapped)

    if point == "rollout":
        before("rollout_stage")
    elif point == "update":
        before("update_stage")
    elif point == "save":
        before("driver_state")  # called inside the save's temporary directory, after the workers wrote theirs
    else:
        real_log = RayPPOTrainer._log

        def log_then_die(self: Any, metrics: dict[str, float], *args: Any, **kwargs: Any) -> None:
            real_log(self, metrics, *args, **kwargs)
            if self.global_steps == step:
                die()

        RayPPOTrainer._log = log_then_die


def weights_digest(step_dir: str) -> str:
    """SHA-256 over the tensors of a checkpoint's trained state (every role's ``model_*``, ``optim_*`` and
    ``adapter_*`` safetensors: weights, LoRA adapters, optimizer moments), by name: equal digests mean bit-identical
    weights and optimizer state (the files' own bytes also hold metadata that differs between runs)."""
    from safetensors import safe_open

    h = hashlib.sha256()
    for root, _dirs, names in sorted(os.walk(step_dir)):
        for name in sorted(names):
            if not (name.startswith(_TRAINED_PREFIXES) and name.endswith(".safetensors")):
                continue
            rel = os.path.relpath(os.path.join(root, name), step_dir)
            with safe_open(os.path.join(root, name), framework="pt") as f:
                for key in sorted(f.keys()):
                    tensor = f.get_tensor(key).contiguous()
                    h.update(f"{rel}:{key}:{tensor.dtype}:{tuple(tensor.shape)}\n".encode())
                    h.update(tensor.view(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return h.hexdigest()


def final_state(out_dir: str) -> dict[str, Any]:
    """``{"step", "digest", "indices"}`` of the newest complete checkpoint under ``out_dir`` (its
    :func:`weights_digest` and its data ledger's consumed prompt indices, in order)."""
    from verl.checkpoint.checkpoint_manager import safe_torch_load
    from verl.checkpoint.layout import get_checkpoint_step, newest_complete_step_dir
    from verl.trainer.ppo.resume_check import LEDGER_KEY

    step_dir = newest_complete_step_dir(out_dir)
    if step_dir is None:
        raise FileNotFoundError(f"no complete checkpoint under {out_dir}")
    state = safe_torch_load(os.path.join(step_dir, "data.pt"), "the driver's training state")
    return {
        "step": get_checkpoint_step(step_dir),
        "digest": weights_digest(step_dir),
        "indices": state[LEDGER_KEY]["indices"].tolist(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--overrides", required=True, help="JSON list of config overrides")
    parser.add_argument("--step", type=int, default=None)
    parser.add_argument("--point", choices=KILL_POINTS, default="after")
    args = parser.parse_args(argv)
    from verl.trainer.config import load_config
    from verl.trainer.ppo.runner import run_ppo

    if args.step is not None:
        _install_kill(args.step, args.point)
    run_ppo(load_config(json.loads(args.overrides)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
