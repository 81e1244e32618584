"""Runs never collide: derived experiment names, and a checkpoint of another model is never resumed.

End to end through the real entry points (in-process ``main_ppo.main`` / ``main_sft.main``, the same code path as
the command line): two tiny models of different architectures (Llama, Qwen2 with tied embeddings and qkv biases)
share one ``trainer.default_local_dir``; the second run exits 2 with one line naming both, before any weights or
tokenizer load, and leaves the first run's checkpoint byte for byte as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.trainer import main_ppo, main_sft

REWARD_SOURCE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return float(len(solution_str))
"""


@pytest.fixture(scope="module")
def task_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("identity_task")
    train, _ = generate_arithmetic_splits(train_size=4, test_size=0, seed=3)
    write_parquet(train, str(root / "train.parquet"))
    (root / "reward.py").write_text(REWARD_SOURCE)
    return {"train": str(root / "train.parquet"), "reward": str(root / "reward.py")}


def _ppo_args(model_dir: str, files: dict[str, str], out: Path | None) -> list[str]:
    args = [
        f"actor_rollout_ref.model.path={model_dir}",
        f"data.train_files={files['train']}",
        f"custom_reward_function.path={files['reward']}",
        "algorithm.adv_estimator=grpo",
        "data.train_batch_size=2",
        "data.max_prompt_length=128",
        "data.max_response_length=2",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.dtype=float32",
        "actor_rollout_ref.rollout.dtype=float32",
        "trainer.total_training_steps=1",
        "trainer.val_before_train=false",
        "trainer.export_hf=false",
        "trainer.plot=false",
        "trainer.device=cpu",
        "trainer.logger=[console]",
        "trainer.torch_threads=1",
    ]
    return args + ([f"trainer.default_local_dir={out}"] if out is not None else [])


def _tree(root: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under ``root`` that the trainer wrote (checkpoints, tracker, logs).

    ``.hydra/`` is left out: the entry point writes Hydra's run record of each invocation into the run directory
    before the trainer starts, so it describes the latest invocation, refused or not.
    """
    out = {}
    for dirpath, dirnames, names in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".hydra"]
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.fixture
def no_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a tokenizer or model is loaded: the refusal must come before either."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"a model or tokenizer was loaded before the checkpoint check: {args[:1]}")

    import verl.models.loader as model_loader
    import verl.trainer.offline.policy_setup as offline_policy_setup

    for module in (model_loader, offline_policy_setup):  # the offline trainers bind the loaders at import
        for name in ("load_tokenizer", "load_causal_lm"):
            monkeypatch.setattr(module, name, refuse)


def test_second_model_in_the_same_dir_stops_before_loading_and_leaves_the_first_untouched(
    tiny_model_dir: str,
    tiny_qwen2_dir: str,
    task_files: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    out = tmp_path / "shared"
    assert main_ppo.main(_ppo_args(tiny_model_dir, task_files, out)) == 0
    marker = json.loads((out / "global_step_1" / "checkpoint_complete.json").read_text())
    ident = marker["identity"]
    assert ident["algorithm"] == "grpo" and ident["roles"] == ["actor"] and ident["lora_rank"] == 0
    actor = ident["models"]["actor"]
    assert actor["path"] == os.path.abspath(tiny_model_dir)
    assert actor["architectures"] == ["LlamaForCausalLM"] and actor["model_type"] == "llama"
    assert actor["num_parameters"] > 0 and actor["hidden_size"] == 64
    before = _tree(out)
    capsys.readouterr()

    request.getfixturevalue("no_model_loads")
    code = main_ppo.main(_ppo_args(tiny_qwen2_dir, task_files, out))
    captured = capsys.readouterr()
    assert code == 2
    lines = [line for line in captured.err.splitlines() if "refusing to resume" in line]
    assert len(lines) == 1, captured.err
    line = lines[0]
    for fragment in (
        str(out / "global_step_1"),
        os.path.abspath(tiny_model_dir),
        os.path.abspath(tiny_qwen2_dir),
        "LlamaForCausalLM",
        "Qwen2ForCausalLM",
        "trainer.experiment_name",
        "trainer.resume_mode=disable trainer.overwrite_checkpoints=true",
        "trainer.default_local_dir",
    ):
        assert fragment in line, (fragment, line)
    assert "Traceback" not in captured.err
    assert _tree(out) == before  # the first run's checkpoint, tracker and logs are untouched


def test_a_rerun_of_the_same_command_resumes_its_own_checkpoint(
    tiny_model_dir: str, task_files: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main_ppo.main(_ppo_args(tiny_model_dir, task_files, out)) == 0
    capsys.readouterr()
    # the same command again: resume_mode=auto finds its own step 1, the last one: said so, nothing trained
    assert main_ppo.main(_ppo_args(tiny_model_dir, task_files, out)) == 0
    assert f"run {out} already finished: its checkpoint global_step_1 is step 1 of 1" in capsys.readouterr().out
    # one more step: it resumes its own checkpoint
    args = [a for a in _ppo_args(tiny_model_dir, task_files, out) if not a.startswith("trainer.total_training_steps")]
    assert main_ppo.main([*args, "trainer.total_training_steps=2"]) == 0
    assert f"resumed from {out / 'global_step_1'} at step 1" in capsys.readouterr().out


def test_without_an_experiment_name_two_models_get_two_directories(
    tiny_model_dir: str,
    tiny_qwen2_dir: str,
    task_files: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    names = []
    for model in (tiny_model_dir, tiny_qwen2_dir):
        assert main_ppo.main(["--cfg", "job", *_ppo_args(model, task_files, None)]) == 0
        text = capsys.readouterr().out
        import yaml

        trainer = yaml.safe_load(text)["trainer"]
        names.append(trainer["experiment_name"])
        # the interpolation in default_local_dir follows the derived name
        assert trainer["default_local_dir"] == f"outputs/verl/{trainer['experiment_name']}"
    model_names = [os.path.basename(tiny_model_dir.rstrip("/")), os.path.basename(tiny_qwen2_dir.rstrip("/"))]
    # <algorithm>-<model basename>-<data set: the train file's directory, since the file is named after its split>
    data_name = os.path.basename(os.path.dirname(task_files["train"]))
    assert names == [f"grpo-{m}-{data_name}" for m in model_names]


def _sft_rows(path: Path) -> str:
    with open(path, "w") as f:
        for i in range(4):
            f.write(json.dumps({"prompt": f"{i}+1=", "response": str(i + 1)}) + "\n")
    return str(path)


def test_sft_second_model_in_the_same_dir_exits_2_before_loading(
    tiny_model_dir: str,
    tiny_qwen2_dir: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    data = _sft_rows(tmp_path / "sft.jsonl")
    out = tmp_path / "sft_out"
    common = [
        f"data.train_files={data}",
        f"trainer.default_local_dir={out}",
        "data.train_batch_size=2",
        "data.micro_batch_size_per_gpu=2",
        "trainer.total_training_steps=1",
        "trainer.export_hf=false",
        "trainer.logger=[file]",
        "trainer.device=cpu",
        "model.dtype=float32",
    ]
    assert main_sft.main([f"model.path={tiny_model_dir}", *common]) == 0
    marker = json.loads((out / "global_step_1" / "checkpoint_complete.json").read_text())
    assert marker["identity"]["trainer"] == "sft" and marker["identity"]["models"]["actor"]["model_type"] == "llama"
    before = _tree(out)
    capsys.readouterr()

    request.getfixturevalue("no_model_loads")
    assert main_sft.main([f"model.path={tiny_qwen2_dir}", *common]) == 2
    err = capsys.readouterr().err
    assert "refusing to resume" in err and os.path.abspath(tiny_qwen2_dir) in err and "Traceback" not in err
    assert _tree(out) == before


def test_python_api_refuses_another_models_checkpoint(byte_tokenizer, tmp_path: Path) -> None:
    """PPOTrainer goes through the same driver: another model's checkpoint is neither resumed nor overwritten."""
    import torch

    from verl import PPOTrainer
    from verl.api.models import Actor
    from verl.checkpoint.identity import CheckpointMismatchError
    from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm

    config = {
        "max_new_tokens": 2,
        "batch_size": 2,
        "num_samples": 2,
        "actor_rollout_ref.actor.dtype": "float32",
        "actor_rollout_ref.rollout.dtype": "float32",
        "trainer.default_local_dir": str(tmp_path / "api"),
    }

    def trainer(spec: TinyModelSpec | None = None) -> PPOTrainer:
        torch.manual_seed(0)
        actor = Actor(make_tiny_causal_lm(spec, tokenizer=byte_tokenizer), byte_tokenizer)
        return PPOTrainer(actor_model=actor, tokenizer=byte_tokenizer, config=config, reward_fn="length")

    first = trainer()
    first.step(["ab", "cd"])
    step_dir = first.save_checkpoint()
    first.close()
    ident = json.loads(Path(step_dir, "checkpoint_complete.json").read_text())["identity"]
    assert ident["models"]["actor"]["architectures"] == ["LlamaForCausalLM"]
    before = _tree(tmp_path / "api")

    other = trainer(TinyModelSpec(arch="qwen2", tie_word_embeddings=True))
    with pytest.raises(CheckpointMismatchError, match="Qwen2ForCausalLM"):
        other.load_checkpoint()  # the latest under its root
    with pytest.raises(CheckpointMismatchError):
        other.load_checkpoint(step_dir)  # named explicitly: a shape mismatch is refused all the same
    with pytest.raises(CheckpointMismatchError):
        other.save_checkpoint()  # would replace global_step_N and let retention delete the first run's
    other.close()
    assert _tree(tmp_path / "api") == before

    same = trainer()
    assert same.load_checkpoint() == 1
    same.close()
