"""examples/agent_loop: the tool-learning recipe's data, reward and table, and the whole script on a tiny model."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from verl.experimental.agent_loop.tool_parser import HermesToolParser

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "examples", "agent_loop")


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_data_has_tool_and_direct_conversations_and_disjoint_problems(tmp_path) -> None:
    args = ["--out", str(tmp_path), "--n_sft", "6", "--n_train", "5", "--n_test", "4"]
    subprocess.run([sys.executable, os.path.join(HERE, "make_tool_data.py"), *args], check=True)
    sft = pq.read_table(tmp_path / "sft.parquet").to_pylist()
    train = pq.read_table(tmp_path / "train.parquet").to_pylist()
    test = pq.read_table(tmp_path / "test.parquet").to_pylist()
    assert (len(sft), len(train), len(test)) == (12, 5, 4)
    tool_convs = [r["messages"] for r in sft if len(r["messages"]) == 5]
    assert len(tool_convs) == 6
    parser = HermesToolParser(None)
    for messages in tool_convs:
        (call,) = parser.parse_text(messages[2]["content"]).calls
        a, b = (int(x) for x in call.parameters()["expression"].split(" * "))
        assert call.name == "calculator" and messages[3] == {"role": "tool", "content": str(a * b)}
        assert messages[4]["content"] == f"The answer is {a * b}."
    questions = [r["prompt"][-1]["content"] for r in train + test]
    sft_questions = {m[1]["content"] for m in tool_convs}
    assert len(set(questions)) == 9 and not sft_questions & set(questions)
    assert all(r["data_source"] == "tool_multiply" and r["reward_model"]["ground_truth"].isdigit() for r in test)


def test_reward_counts_only_the_answer_sentence() -> None:
    score = _module("tool_reward").compute_score
    tool_turn = '<tool_call>{"name": "calculator"}</tool_call><|im_start|>tool\n408<|im_end|>\n'
    assert score("tool_multiply", tool_turn + "The answer is 408.", "408") == 1.0
    assert score("tool_multiply", tool_turn + "I do not know.", "408") == 0.0
    assert score("tool_multiply", "The answer is 407. The answer is 4,08", "408") == 1.0


def test_summary_reads_the_validation_records(tmp_path, capsys) -> None:
    def write(run: str, records: list[tuple[int, float, float]]) -> None:
        os.makedirs(tmp_path / run / "logs")
        with open(tmp_path / run / "logs" / "metrics.jsonl", "w") as f:
            for step, acc, calls in records:
                metrics = {"val-core/tool_multiply/reward/mean@1": acc, "val-agent/tool_calls/mean": calls}
                f.write(json.dumps({"step": step, "metrics": metrics}) + "\n")
            f.write(json.dumps({"step": 1, "metrics": {"actor/pg_loss": 0.1}}) + "\n")

    write("base", [(0, 0.0, 0.0)])
    write("grpo", [(0, 0.25, 0.5), (20, 0.75, 1.0)])
    _module("summarize_tool_learning").main(str(tmp_path))
    out = capsys.readouterr().out
    assert "| base model | 0.000 | 0.000 |" in out
    assert "| after SFT | 0.250 | 0.500 |" in out and "| after GRPO (step 20) | 0.750 | 1.000 |" in out


@pytest.mark.slow
def test_the_recipe_runs_end_to_end_on_a_tiny_model(tiny_model_dir, tmp_path) -> None:
    env = dict(
        os.environ,
        PYTHON=sys.executable,
        PYTHONPATH=ROOT,
        MODEL=tiny_model_dir,
        OUT=str(tmp_path / "run"),
        N_SFT="4",
        N_TRAIN="4",
        N_TEST="2",
        BATCH="2",
        GROUP="2",
        SFT_STEPS="1",
        GRPO_STEPS="1",
        PROMPT_LEN="160",
        RESPONSE_LEN="24",
        SFT_MAX_LEN="400",
    )
    script = os.path.join(HERE, "run_tool_learning.sh")
    result = subprocess.run(["bash", script], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "| base model |" in result.stdout and "| after GRPO (step 1) |" in result.stdout
    assert os.path.exists(tmp_path / "run" / "sft" / "hf_model" / "config.json")
