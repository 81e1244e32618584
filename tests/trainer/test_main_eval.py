"""main_eval: metrics worked out by hand on a parquet of generations, CLI errors, and generation with a model."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verl.trainer.main_eval import extract_answer, main, maj_at_k, pass_at_k


def test_pass_at_k_by_hand():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(4, 2, 2) == pytest.approx(1 - 1 / 6)  # 1 - C(2,2)/C(4,2)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # 1 - C(3,3)/C(5,3)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 3, 2) == 1.0
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(2, 1, 3)


def test_maj_at_k_by_hand():
    assert maj_at_k(["3", "4", "4", "3"], [True, False, False, True], 3) == 0.0  # 4 wins 2:1
    assert maj_at_k(["3", "4", "4", "3"], [True, False, False, True], 4) == 1.0  # tie 2:2, 3 seen first
    assert maj_at_k([None, None, "5"], [False, False, True], 3) == 1.0  # no-answer responses do not vote
    assert maj_at_k([None], [False], 1) == 0.0


def test_extract_answer_normalises_numbers_and_boxes():
    assert extract_answer("arithmetic", "so it is 4.0") == extract_answer("arithmetic", "4") == "4"
    assert extract_answer("HuggingFaceH4/MATH-500", r"thus \boxed{\frac{1}{2}} or 3") is not None
    assert extract_answer("arithmetic", "  ") is None


def _write(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def _gen_rows():
    gt = lambda x: {"ground_truth": x}  # noqa: E731
    return [
        # arithmetic, truth 7: correct, wrong(8), correct, wrong(8) -> c=2
        {"data_source": "arithmetic", "responses": ["7", "8", "it is 7", "8"], "reward_model": gt("7")},
        # arithmetic, truth 5: only the last is correct -> c=1, majority "6"
        {"data_source": "arithmetic", "responses": ["6", "6", "4", "5"], "reward_model": gt("5")},
        # gsm8k, truth 3: strict format "#### 3" in 3 of 4 -> c=3
        {"data_source": "openai/gsm8k", "responses": ["#### 3", "#### 3", "3", "#### 3"], "reward_model": gt("3")},
    ]


def test_scores_a_parquet_of_generations(tmp_path, capsys):
    data = _write(tmp_path / "gens.parquet", _gen_rows())
    out = tmp_path / "res" / "result.json"
    assert main([f"data.path={data}", f"output.path={out}"]) == 0
    printed = json.loads(capsys.readouterr().out)
    result = json.loads(out.read_text())
    assert printed == result
    assert result["mode"] == "generations" and result["n"] == 4 and result["k"] == [1, 2, 4]
    assert result["num_prompts"] == 3
    arith, gsm, everything = (result["metrics"][k] for k in ("arithmetic", "openai/gsm8k", "all"))
    assert arith["mean@4"] == pytest.approx((2 / 4 + 1 / 4) / 2)
    assert arith["pass@1"] == pytest.approx((0.5 + 0.25) / 2)
    assert arith["pass@2"] == pytest.approx(((1 - 1 / 6) + (1 - 3 / 6)) / 2)
    assert arith["pass@4"] == 1.0
    # maj@2: row 1 answers 7,8 -> tie, 7 first -> correct; row 2 answers 6,6 -> wrong
    assert arith["maj@2"] == pytest.approx(0.5)
    # maj@4: row 1 7:2, 8:2 -> 7 first -> correct; row 2 6 wins -> wrong
    assert arith["maj@4"] == pytest.approx(0.5)
    assert gsm["mean@4"] == pytest.approx(0.75) and gsm["pass@2"] == 1.0
    assert everything["mean@4"] == pytest.approx((0.5 + 0.25 + 0.75) / 3)


def test_custom_k_threshold_and_reward_function(tmp_path, capsys):
    fn = tmp_path / "reward.py"
    fn.write_text(
        "def score(data_source, solution_str, ground_truth, extra_info=None):\n    return len(solution_str) / 10\n"
    )
    data = _write(
        tmp_path / "g.parquet",
        [{"data_source": "x", "responses": ["a" * 5, "a" * 10], "reward_model": {"ground_truth": ""}}],
    )
    args = [f"data.path={data}", "metrics.k=[2]", "metrics.correct_threshold=0.6"]
    assert main(args + [f"custom_reward_function.path={fn}", "custom_reward_function.name=score"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["k"] == [2]
    assert result["metrics"]["x"] == {"mean@2": pytest.approx(0.75), "pass@2": 1.0, "maj@2": 0.0}


def test_bad_inputs_exit_2_with_a_clear_message(tmp_path, capsys):
    assert main([]) == 2
    assert "data.path: required" in capsys.readouterr().err
    assert main([f"data.path={tmp_path / 'missing.parquet'}"]) == 2
    assert "missing.parquet does not exist" in capsys.readouterr().err
    no_col = _write(tmp_path / "a.parquet", [{"data_source": "arithmetic", "reward_model": {"ground_truth": "1"}}])
    assert main([f"data.path={no_col}"]) == 2
    assert "missing column(s) ['responses']" in capsys.readouterr().err
    ragged = _write(
        tmp_path / "r.parquet",
        [
            {"data_source": "arithmetic", "responses": ["1", "2"], "reward_model": {"ground_truth": "1"}},
            {"data_source": "arithmetic", "responses": ["1"], "reward_model": {"ground_truth": "1"}},
        ],
    )
    assert main([f"data.path={ragged}"]) == 2
    assert "row 1: 1 responses, but row 0 has 2" in capsys.readouterr().err
    assert main(["data.path=x.parquet", "metrics.k=[0]"]) == 2
    assert "metrics.k" in capsys.readouterr().err


def test_generates_with_a_model_then_scores(tmp_path, tiny_model_dir, capsys):
    from verl.data.arithmetic_task import generate_arithmetic_rows, write_parquet

    prompts = tmp_path / "prompts.parquet"
    write_parquet(generate_arithmetic_rows(3, seed=1), str(prompts))
    gens = tmp_path / "gens.parquet"
    args = [
        f"data.path={prompts}",
        f"model.path={tiny_model_dir}",
        "rollout.n=2",
        "rollout.response_length=4",
        "data.batch_size=2",
        "trainer.device=cpu",
        f"output.generations_path={gens}",
    ]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["mode"] == "generate" and result["n"] == 2 and result["num_prompts"] == 3
    assert 0.0 <= result["metrics"]["arithmetic"]["mean@2"] <= 1.0
    saved = pq.read_table(gens).to_pylist()
    assert len(saved) == 3 and all(len(r["responses"]) == 2 for r in saved)
    # the saved generations score to the same numbers in mode 1
    assert main([f"data.path={gens}"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"] == result["metrics"]
