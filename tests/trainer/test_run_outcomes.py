"""Exit codes mean something, through the real entry point (in-process ``main_ppo.main``, tiny Llama, CPU):

* a finished run run again says so in one line, exits 0, loads no model and changes no file;
* a resume with another ``data.train_batch_size`` is one line naming the key and the run, exit 2, before loading;
* a run that trains no step (the data ran out) fails with ``NoTrainingStepsError``, exit 1;
* a reward that fails for every sample is said at the first such step and, at
  ``trainer.max_degenerate_reward_steps`` in a row, ends the run with ``DegenerateRewardError`` (exit 1) recorded in
  ``run_info.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.trainer import main_ppo

LENGTH_REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return float(len(solution_str))
"""
FAILING_REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    raise RuntimeError("the judge's answer could not be parsed")
"""


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("outcomes_task")
    train, _ = generate_arithmetic_splits(train_size=4, test_size=0, seed=5)
    write_parquet(train, str(root / "train.parquet"))
    (root / "length.py").write_text(LENGTH_REWARD)
    (root / "failing.py").write_text(FAILING_REWARD)
    return {"train": str(root / "train.parquet"), "length": str(root / "length.py"), "fail": str(root / "failing.py")}


def _args(model: str, task: dict[str, str], out: Path, reward: str = "length", **over: object) -> list[str]:
    keys: dict[str, object] = {
        "actor_rollout_ref.model.path": model,
        "data.train_files": task["train"],
        "custom_reward_function.path": task[reward],
        "algorithm.adv_estimator": "grpo",
        "data.train_batch_size": 2,
        "data.max_prompt_length": 128,
        "data.max_response_length": 2,
        "actor_rollout_ref.rollout.n": 2,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
        "actor_rollout_ref.actor.dtype": "float32",
        "actor_rollout_ref.rollout.dtype": "float32",
        "reward_model.num_workers": 0,
        "reward_model.timeout_s": 0,
        "trainer.total_epochs": 1,
        "trainer.total_training_steps": 2,
        "trainer.val_before_train": "false",
        "trainer.export_hf": "false",
        "trainer.device": "cpu",
        "trainer.logger": "[console,file]",
        "trainer.torch_threads": 1,
        "trainer.default_local_dir": str(out),
    }
    keys.update(over)
    return [f"{k}={v}" for k, v in keys.items()]


def _tree(root: Path) -> dict[str, str]:
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
    def refuse(*args, **kwargs):
        raise AssertionError(f"a model or tokenizer was loaded: {args[:1]}")

    import verl.models.loader as model_loader

    for name in ("load_tokenizer", "load_causal_lm"):
        monkeypatch.setattr(model_loader, name, refuse)


def test_finished_run_mismatched_resume_and_zero_steps(
    tiny_model_dir: str,
    task: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    out = tmp_path / "run"
    assert main_ppo.main(_args(tiny_model_dir, task, out)) == 0  # 2 steps: the whole epoch (4 rows, 2 per step)
    info = json.loads((out / "run_info.json").read_text())
    assert info["status"] == "finished" and info["pid"] == os.getpid() and info["global_step"] == 2
    before = _tree(out)
    capsys.readouterr()

    # 1. the same command again: one line, exit 0, no model loaded, nothing rewritten
    with monkeypatch.context() as m:
        import verl.models.loader as model_loader

        def refuse(*args, **kwargs):
            raise AssertionError("a tokenizer or model was loaded for a finished run")

        m.setattr(model_loader, "load_tokenizer", refuse)
        m.setattr(model_loader, "load_causal_lm", refuse)
        assert main_ppo.main(_args(tiny_model_dir, task, out)) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.out.splitlines() if "already finished" in line]
    assert len(lines) == 1, captured.out
    for fragment in (str(out), "global_step_2", "step 2 of 2", "trainer.total_training_steps", "resume_mode=disable"):
        assert fragment in lines[0], (fragment, lines[0])
    assert "resumed from" not in captured.out and "Traceback" not in captured.err
    assert _tree(out) == before

    # 2. another batch size where the run would resume: one line naming the key and the run, exit 2, no load
    with monkeypatch.context() as m:
        import verl.models.loader as model_loader

        m.setattr(model_loader, "load_causal_lm", lambda *a, **k: (_ for _ in ()).throw(AssertionError("loaded")))
        code = main_ppo.main(
            _args(
                tiny_model_dir,
                task,
                out,
                **{"data.train_batch_size": 4, "actor_rollout_ref.actor.ppo_mini_batch_size": 4},
                **{"trainer.total_training_steps": 3},
            )
        )
    captured = capsys.readouterr()
    assert code == 2, captured.err
    err_lines = [line for line in captured.err.splitlines() if "refusing to resume" in line]
    assert len(err_lines) == 1 and "Traceback" not in captured.err, captured.err
    assert "data.train_batch_size 2 vs 4" in err_lines[0] and str(out / "global_step_2") in err_lines[0]
    assert _tree(out) == before

    # 3. more steps than the data holds (one epoch, already consumed): trained 0 steps, exit 1, named
    code = main_ppo.main(_args(tiny_model_dir, task, out, **{"trainer.total_training_steps": 3}))
    captured = capsys.readouterr()
    assert code == 1
    line = [x for x in captured.err.splitlines() if "NoTrainingStepsError" in x]
    assert len(line) == 1 and "trained 0 steps" in line[0] and "trainer.total_epochs=1" in line[0], captured.err
    assert "Traceback" not in captured.err


def test_a_reward_that_fails_for_every_sample_stops_the_run(
    tiny_model_dir: str, task: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "degenerate"
    args = _args(
        tiny_model_dir,
        task,
        out,
        reward="fail",
        **{"reward_model.on_error": "zero", "trainer.max_degenerate_reward_steps": 2, "trainer.total_epochs": 2},
        **{"trainer.total_training_steps": 4, "trainer.save_freq": 1},
    )
    code = main_ppo.main(args)
    captured = capsys.readouterr()
    assert code == 1
    warned = [x for x in captured.err.splitlines() if x.startswith("[verl] warning: step")]
    assert len(warned) == 1 and "step 1:" in warned[0] and "reward_error 100%" in warned[0], captured.err
    failed = [x for x in captured.err.splitlines() if "DegenerateRewardError" in x]
    assert len(failed) == 1 and "step 2:" in failed[0] and "max_degenerate_reward_steps=2" in failed[0]
    assert "Traceback" not in captured.err
    info = json.loads((out / "run_info.json").read_text())
    assert info["status"] == "failed" and "DegenerateRewardError" in info["error"]


def test_an_offline_trainer_says_its_run_is_finished_and_refuses_another_batch_size(
    tiny_model_dir: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from verl.trainer import main_sft

    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+1=", "response": str(i + 1)}) + "\n" for i in range(4)))
    out = tmp_path / "sft"
    args = [
        f"model.path={tiny_model_dir}",
        f"data.train_files={data}",
        f"trainer.default_local_dir={out}",
        "data.train_batch_size=2",
        "data.micro_batch_size_per_gpu=2",
        "trainer.total_training_steps=1",
        "trainer.logger=[file]",
        "trainer.device=cpu",
        "model.dtype=float32",
    ]
    assert main_sft.main(args) == 0
    before = _tree(out)
    capsys.readouterr()
    assert main_sft.main(args) == 0
    text = capsys.readouterr().out
    assert f"run {out} already finished: its checkpoint global_step_1 is step 1 of 1" in text
    assert "resumed from" not in text and _tree(out) == before
    # one more step with another batch size: the data position would not continue; one line, exit 2
    more = [a for a in args if not a.startswith(("trainer.total_training_steps", "data.train_batch_size"))]
    assert main_sft.main([*more, "trainer.total_training_steps=2", "data.train_batch_size=4"]) == 2
    err = capsys.readouterr().err
    assert "refusing to resume" in err and "data.train_batch_size 2 vs 4" in err and "Traceback" not in err
    assert _tree(out) == before


@pytest.mark.parametrize(
    ("over", "said"),
    [
        ({"custom_reward_function.path": "missing_reward.py"}, "custom_reward_function.path: reward function file "),
        ({"reward_model.reward_manager": "nope"}, "Unknown reward manager: nope. Set reward.reward_manager.name"),
        ({"actor_rollout_ref.actor.freeze_vision_tower": "true"}, "freeze_vision_tower=true but "),
        (
            {
                "actor_rollout_ref.rollout.multi_turn.enable": "true",
                "data.return_raw_chat": "true",
                "actor_rollout_ref.rollout.agent.default_agent_loop": "openai_agent",
                "actor_rollout_ref.rollout.agent.openai.agent": "my_pkg/my_agent.py:run",
            },
            "actor_rollout_ref.rollout.agent.openai.agent='my_pkg/my_agent.py:run': no such file ",
        ),
    ],
    ids=["reward-file", "reward-manager", "vision-tower-of-a-text-model", "agent-file"],
)
def test_what_the_config_names_but_cannot_be_found_stops_the_run_at_start_in_one_line(
    tiny_model_dir: str,
    task: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    over: dict[str, str],
    said: str,
) -> None:
    """Exit 2 with one line naming the key (and no traceback), at run start before the workers build, for things
    only the run can check: a file, a registered name, the model's kind."""
    monkeypatch.chdir(tmp_path)
    assert main_ppo.main(_args(tiny_model_dir, task, tmp_path / "out", **over)) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if said in line]
    assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
