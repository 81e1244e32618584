"""Train one step of every upstream launch script our config accepts, shrunk to a tiny model on this machine.

``scripts/upstream_scripts.py --json calls.json`` says which of upstream verl's ``examples/**/*.sh`` our entry point
accepts (``--cfg job``); this runs each accepted ``verl.trainer.main_ppo`` call (and the asynchronous trainers'
entry points, :data:`TRAINERS`, and v0.9's SFT entry points, :data:`SFT_TRAINERS`, :func:`one_sft_step_args`) for
real, for one step::

    PYTHONPATH=$PWD python scripts/upstream_scripts.py /work/.mirror/verl-project+verl/repo --json /tmp/calls.json
    PYTHONPATH=$PWD python scripts/upstream_scripts_step.py /tmp/calls.json [--rollout hf] [--only grpo_trainer]

What is changed, and only that (:func:`one_step_args`): every model path (actor, critic, reward model, teachers) is a
random Qwen2-shaped model of 264k parameters with a byte tokenizer (head size 64, so vLLM's CPU kernels take it), the
data is the arithmetic task, a script's ``trainer.device=cuda`` is ``cpu`` on a machine without CUDA, the world is one
rank and the asynchronous trainers' rollout pool one device (parallel sizes 1; ``fsdp_size``, ``max_model_len`` and
upstream's ``uv run`` ``py_executable`` dropped), and the batch is 2 prompts x 2 responses of at most 8 tokens in
micro-batches of 2 for one step without validation or checkpoints. A call refused only for those sizes (a rollout pool
of several GPUs, :func:`only_sizes`) is trained too. DAPO's keys are shrunk with it: the generation batch
(``data.gen_batch_size``) to 2 prompts and the overlong buffer to 4 of the 8 tokens (``max_resp_len`` from the data's
length); and where a script turns on dynamic sampling (``algorithm.filter_groups.enable=True``), the score is a hash
of the response in [0, 1) (:data:`VARIED_SCORER`), since a random model's answers all score 0 and every group would be
filtered out. Every other key (the algorithm, losses, offload, LoRA, dynamic batch sizes, rollout correction,
distillation, ...) runs as the script wrote it. ``--rollout hf`` swaps vLLM for the ``hf`` engine (faster to start on
CPU). A call fails when it exits non-zero; its last error line is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# keys sized for several GPUs or the script's own model and lengths (micro-batch and DAPO sizes are set below): dropped
_DROPPED = re.compile(
    r"(ulysses_sequence_parallel_size|fsdp_size|py_executable|micro_batch_size(_per_gpu)?|max_model_len"
    r"|gen_batch_size|overlong_buffer(_cfg)?\.len|max_resp_len)="
)
# the PPO entry points whose calls are trained (the asynchronous trainers are main_ppo with another default config)
TRAINERS = (
    "verl.trainer.main_ppo",
    "verl.experimental.fully_async_policy.fully_async_main",
    "verl.experimental.one_step_off_policy.main_ppo",
)
# v0.9's SFT entry points (the same sft_trainer_engine keys): their calls are trained too, on conversations
SFT_TRAINERS = ("verl.trainer.sft_trainer", "verl.trainer.sft_trainer_ray")
# refusals of sizes this harness shrinks anyway: a call stopped only by them is trained too (v0.9's async scripts ask
# for rollout pools on several machines and tensor-parallel rollout; shrunk to one device, their algorithm runs)
_SHRUNK_SIZES = (
    re.compile(r"^rollout\.nnodes=\d+: a rollout pool across machines runs as Ray actors"),
    re.compile(r"^actor_rollout_ref\.rollout\.tensor_model_parallel_size=\d+: (a tensor-parallel|each replica)"),
    re.compile(r"do not split evenly over world size trainer\.nnodes \* trainer\.n_gpus_per_node"),
)


def only_sizes(call: dict) -> bool:
    """Whether every error of a rejected call is a size :func:`one_step_args` shrinks."""
    errors = call.get("errors") or []
    return bool(errors) and all(any(p.search(e) for p in _SHRUNK_SIZES) for e in errors)


# the reward of a dynamic-sampling step: groups of a random model's responses must score differently to be kept
VARIED_SCORER = """import hashlib


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return int(hashlib.sha256(solution_str.encode()).hexdigest()[:8], 16) / 16**8
"""
# a teacher's parallel layout (distillation.teacher_models.<name>.inference.*): one rank each
_TEACHER_LAYOUT = re.compile(
    r"^(\+?distillation\..*\.(?:tensor_model_parallel_size|data_parallel_size|expert_parallel_size|num_replicas))="
)
_MODEL_PATH = re.compile(
    r"^\+?((?:critic|reward_model)\.model\.path|reward\.reward_model\.model_path|distillation\..*model_path)="
)


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def one_step_args(args: list[str], model_dir: str, data_dir: str, out_dir: str, rollout: str | None) -> list[str]:
    """The call's arguments with the changes of the module docstring (later overrides win, so they come last)."""
    kept, extra = [], []
    teachers = 0
    for arg in args:
        if _DROPPED.search(arg):
            continue
        layout = _TEACHER_LAYOUT.match(arg)
        if layout:
            kept.append(f"{layout.group(1)}=1")
            continue
        path = _MODEL_PATH.match(arg)
        if path:
            teachers += path.group(1).startswith("distillation.")
            extra.append(f"{path.group(1)}={model_dir}")  # without the script's +: its own + adds the key
        kept.append(arg)
    extra += [
        f"actor_rollout_ref.model.path={model_dir}",
        f"data.train_files={data_dir}/train.parquet",
        f"data.val_files={data_dir}/test.parquet",
        "data.prompt_key=prompt",
        "data.train_batch_size=2",
        "data.max_prompt_length=128",
        "data.max_response_length=8",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        "trainer.total_training_steps=1",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.logger=[console]",
        f"trainer.default_local_dir={out_dir}",
    ]
    if any(a.startswith(("critic.", "algorithm.adv_estimator=gae")) for a in args):
        extra += ["critic.ppo_mini_batch_size=2", "critic.ppo_micro_batch_size_per_gpu=2"]
    if teachers:  # each teacher one rank, on the Ray backend that separate pools need
        extra += ["trainer.backend=ray", "distillation.nnodes=1", f"distillation.n_gpus_per_node={teachers}"]
    if any(a.lstrip("+").startswith("data.gen_batch_size=") for a in args):
        extra.append("data.gen_batch_size=2")
    if any(re.search(r"overlong_buffer(_cfg)?\.enable=[Tt]rue", a) for a in args):
        extra.append("reward_model.overlong_buffer.len=4")
    if any(re.match(r"^algorithm\.filter_groups\.enable=[Tt]rue$", a) for a in args):
        extra += [f"reward.custom_reward_function.path={os.path.join(os.path.dirname(data_dir), 'varied_score.py')}",
                  "reward.custom_reward_function.name=compute_score"]  # fmt: skip
    if any(a.startswith(("rollout.nnodes=", "rollout.n_gpus_per_node=")) for a in args):
        extra += ["rollout.nnodes=1", "rollout.n_gpus_per_node=1"]  # v0.9's async scripts: the rollouter's pool
    if rollout:
        extra.append(f"actor_rollout_ref.rollout.name={rollout}")
    if any(a == "trainer.device=cuda" for a in args) and not _has_cuda():
        extra.append("trainer.device=cpu")  # upstream's CI scripts name the device; this machine has none
    return [a for a in kept if not a.startswith(("actor_rollout_ref.model.path=", "data.train_files=",
                                                   "data.val_files="))] + extra  # fmt: skip


def one_sft_step_args(args: list[str], model_dir: str, data_dir: str, out_dir: str) -> list[str]:
    """An SFT call's arguments shrunk as :func:`one_step_args` shrinks a PPO call's: the tiny model, the arithmetic
    task as conversations (``messages``), one rank, a batch of 2 rows in micro-batches of 1, one step without
    validation or checkpoints; every other key (LoRA, Liger, packing, dynamic batch sizes, the optimizer and its
    schedule, padding modes) as the call wrote it."""
    kept = [a for a in args if not _DROPPED.search(a) and not a.startswith(("trainer.nnodes=", "trainer.n_gpus"))]
    kept = [a for a in kept if not a.startswith(("model.path=", "data.train_files=", "data.val_files="))]
    extra = [
        f"model.path={model_dir}",
        f"data.train_files={data_dir}/sft_train.parquet",
        f"data.val_files={data_dir}/sft_test.parquet",
        "data.messages_key=messages",
        "data.train_batch_size=2",
        "data.micro_batch_size_per_gpu=1",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        "trainer.total_training_steps=1",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.logger=[console]",
        f"trainer.default_local_dir={out_dir}",
    ]
    if not _has_cuda():
        extra.append("trainer.device=cpu")  # upstream's SFT default device is cuda
    return kept + extra


def script_relative_paths(args: list[str], tree: str, script: str) -> list[str]:
    """``args`` with each relative ``*.path=FILE`` that exists next to the script (not under ``tree``, the directory
    the scripts run from) made absolute: verl-recipe's ``char_count`` is run from its own folder
    (``custom_reward_function.path=./reward_function.py``), the others from verl's root."""
    out = []
    for arg in args:
        key, sep, value = arg.partition("=")
        if sep and key.endswith("path") and value and not os.path.isabs(value):
            beside = os.path.join(tree, os.path.dirname(script), value)
            if not os.path.exists(os.path.join(tree, value)) and os.path.exists(beside):
                arg = f"{key}={os.path.normpath(beside)}"
        out.append(arg)
    return out


def _import_root(work: str) -> str:
    """A directory holding only this project's ``verl`` package (a link), for the verl-recipe calls: with this
    checkout itself on the path its own ``recipe/`` package would shadow verl-recipe's (``recipe.retool``, ...)."""
    root = os.path.join(work, "import_root")
    if not os.path.isdir(root):
        os.makedirs(root)
        os.symlink(os.path.join(ROOT, "verl"), os.path.join(root, "verl"))
    return root


def _last_error(text: str) -> str:
    """The line that says why a run stopped: a config problem (``  - ...`` under ``invalid config``), else the last
    line naming an error."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(("File ", "^"))]
    problems = [ln for ln in lines if ln.startswith("- ")]
    errors = [ln for ln in lines if re.search(r"(Error|error|refus)", ln)]
    return (problems[:1] or errors[-1:] or lines[-1:] or ["(no output)"])[0][:400]


def make_inputs(workdir: str) -> tuple[str, str]:
    """The tiny model and the arithmetic task's parquet files under ``workdir``."""
    from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
    from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm

    model_dir, data_dir = os.path.join(workdir, "model"), os.path.join(workdir, "data")
    spec = TinyModelSpec(arch="qwen2", hidden_size=128, num_attention_heads=2, num_key_value_heads=1)
    make_tiny_causal_lm(spec, save_dir=model_dir, seed=0)
    train, test = generate_arithmetic_splits(train_size=16, test_size=4, seed=0)
    os.makedirs(data_dir)
    write_parquet(train, os.path.join(data_dir, "train.parquet"))
    write_parquet(test, os.path.join(data_dir, "test.parquet"))
    import pandas as pd

    for name, rows in (("sft_train", train), ("sft_test", test)):  # the same problems as conversations
        chats = [[*r["prompt"], {"role": "assistant", "content": r["reward_model"]["ground_truth"]}] for r in rows]
        pd.DataFrame({"messages": chats}).to_parquet(os.path.join(data_dir, f"{name}.parquet"))
    with open(os.path.join(workdir, "varied_score.py"), "w") as f:
        f.write(VARIED_SCORER)
    return model_dir, data_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("calls_json", nargs="+", help="--json files of scripts/upstream_scripts.py")
    parser.add_argument("--rollout", choices=["hf", "vllm"], help="replace the scripts' rollout engine")
    parser.add_argument("--only", nargs="*", default=[], help="scripts whose path contains one of these")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per call")
    args = parser.parse_args(argv)
    snapshots: dict = {}
    for path in args.calls_json:
        with open(path) as f:
            snapshots.update(json.load(f))
    failed = ran = 0
    with tempfile.TemporaryDirectory(prefix="upstream_step_") as work:
        model_dir, data_dir = make_inputs(work)
        for label, snapshot in snapshots.items():
            print(f"## {label} ({snapshot['head']})", flush=True)
            for i, call in enumerate(snapshot["calls"]):
                sft = call["module"] in SFT_TRAINERS and call["status"] == "accepted"
                if not sft and (
                    call["module"] not in TRAINERS or not (call["status"] == "accepted" or only_sizes(call))
                ):
                    continue
                if args.only and not any(o in call["script"] for o in args.only):
                    continue
                out = os.path.join(work, f"run{len(label)}-{i}")
                tree = snapshot.get(
                    "tree"
                )  # verl-recipe: its calls run from the kept tree (scripts/upstream_scripts.py)
                call_args = script_relative_paths(call["args"], tree, call["script"]) if tree else call["args"]
                shrunk = (
                    one_sft_step_args(call_args, model_dir, data_dir, out)
                    if sft
                    else one_step_args(call_args, model_dir, data_dir, out, args.rollout)
                )
                cmd = [sys.executable, "-m", call["module"], *shrunk]
                env = {
                    **os.environ,
                    "HOME": os.path.join(out, "home"),
                    "PYTHONPATH": _import_root(work) if tree else ROOT,
                }
                start = time.perf_counter()
                try:
                    proc = subprocess.run(
                        cmd, cwd=tree or ROOT, env=env, capture_output=True, text=True, timeout=args.timeout
                    )
                    rc, text = proc.returncode, proc.stdout + proc.stderr
                except subprocess.TimeoutExpired:
                    rc, text = "timeout", f"more than {args.timeout:.0f} s"
                seconds = time.perf_counter() - start
                if rc == 0:
                    ran += 1
                    print(f"- ran    {call['script']} ({seconds:.0f} s)", flush=True)
                else:
                    failed += 1
                    print(f"- failed {call['script']} (exit {rc}): {_last_error(text)}", flush=True)
    print(f"\n{ran} ran one step, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
