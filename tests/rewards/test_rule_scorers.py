"""Rule scorers: gsm8k (strict / flexible), MATH boxed answers, arithmetic, and default_compute_score routing."""

from __future__ import annotations

import pytest

from verl.rewards import default_compute_score, gsm8k
from verl.rewards import math as math_score
from verl.rewards.arithmetic import compute_score as arith_score
from verl.rewards.arithmetic import extract_last_number


# ----------------------------------------------------------------------------------------------- gsm8k
def test_gsm8k_strict():
    assert gsm8k.extract_solution("3 + 4 = 7\n#### 7") == "7"
    assert gsm8k.extract_solution("#### 5 then fixed it #### 1,234.") == "1234"
    assert gsm8k.extract_solution("the answer is 7") is None
    assert gsm8k.compute_score("so #### 72", "72") == 1.0
    assert gsm8k.compute_score("so #### 71", "72") == 0.0
    assert gsm8k.compute_score("so #### 71", "72", format_score=0.1) == 0.1
    assert gsm8k.compute_score("so 72", "72") == 0.0  # strict needs ####
    assert gsm8k.compute_score("#### $1,000", "1000") == 1.0
    assert gsm8k.compute_score("#### 18.0", "18") == 1.0


def test_gsm8k_flexible():
    assert gsm8k.extract_solution("first 12 then 30.", method="flexible") == "30"
    assert gsm8k.compute_score("It costs $1,500 in total.", "1500", method="flexible") == 1.0
    assert gsm8k.compute_score("12 then -3", "-3", method="flexible") == 1.0
    assert gsm8k.compute_score("no digits here", "3", method="flexible") == 0.0
    # only the tail is searched: an early answer followed by 300+ chars of text is not found
    assert gsm8k.compute_score("#### 5" + " blah" * 100, "5") == 0.0
    with pytest.raises(ValueError, match="method"):
        gsm8k.extract_solution("x", method="loose")


# ----------------------------------------------------------------------------------------------- math
def test_last_boxed_with_nested_braces():
    text = r"First \boxed{1}. Finally $\boxed{\frac{\sqrt{3}}{2}}$ done."
    assert math_score.last_boxed_content(text) == r"\frac{\sqrt{3}}{2}"
    assert math_score.last_boxed_content(r"\fbox{x^{2}}") == "x^{2}"
    assert math_score.last_boxed_content(r"answer \boxed 5$") == "5"
    assert math_score.last_boxed_content(r"\boxed{unclosed {") is None
    assert math_score.last_boxed_content("no box") is None


@pytest.mark.parametrize(
    "answer, reference",
    [
        (r"\dfrac{1}{2}", r"\frac12"),
        ("0.5", r"\frac{1}{2}"),
        ("1/2", r"\frac{1}{2}"),
        (r"\left( 1, 2 \right)", "(1,2)"),
        (r"90^\circ", "90"),
        (r"5\%", "5"),
        (r"x = 3", "3"),
        (r"\text{(B)}", "(B)"),
        (".75", "0.75"),
        ("1,000", "1000"),
        (r"2\sqrt2", r"2\sqrt{2}"),
        (r"-\frac{3}{4}", "-0.75"),
    ],
)
def test_math_equivalent_forms(answer, reference):
    assert math_score.compute_score(rf"so \boxed{{{answer}}}", reference) == 1.0


@pytest.mark.parametrize("answer, reference", [("3", "4"), (r"\frac{1}{3}", "0.33"), ("(1,2)", "(2,1)"), ("x", "y")])
def test_math_different_answers(answer, reference):
    assert math_score.compute_score(rf"\boxed{{{answer}}}", reference) == 0.0


def test_math_reference_with_boxed_and_missing_box():
    assert math_score.compute_score(r"\boxed{7}", r"We get \boxed{7}.") == 1.0
    assert math_score.compute_score("7", "7") == 0.0  # no boxed answer in the response


# ----------------------------------------------------------------------------------------------- arithmetic
def test_arithmetic_scorer():
    assert arith_score("42", "42") == 1.0
    assert arith_score("23 + 19 = 42.", "42") == 1.0
    assert arith_score("The answer is 42, not 41", "42") == 0.0  # last number counts
    assert arith_score("12-4", "4") == 1.0  # hyphen after a digit is not a sign
    assert arith_score("It is -4", "-4") == 1.0
    assert arith_score("2,500", "2500") == 1.0
    assert arith_score("42.0", "42") == 1.0
    assert arith_score("42.5", "42") == 0.0
    assert arith_score("forty-two", "42") == 0.0
    assert arith_score("", "42") == 0.0
    assert extract_last_number("a 1 b 22 c") == 22
    with pytest.raises(ValueError, match="ground_truth 'abc'"):
        arith_score("1", "abc")


def test_arithmetic_never_evaluates_expressions():
    # "6*7" must be read as the numbers 6 and 7, never computed to 42
    assert arith_score("6*7", "42") == 0.0
    assert arith_score("__import__('os')", "0") == 0.0


# ----------------------------------------------------------------------------------------------- routing
def test_default_compute_score_routing():
    assert default_compute_score("openai/gsm8k", "#### 10", "10") == 1.0
    assert default_compute_score("openai/gsm8k", "it is 10", "10", method="flexible") == 1.0
    assert default_compute_score("openai/gsm8k", "#### 9", "10", format_score=0.2) == 0.2
    for source in ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500"):
        assert default_compute_score(source, r"\boxed{\frac{2}{4}}", r"\frac{1}{2}") == 1.0
    assert default_compute_score("arithmetic", "7", "7", extra_info={"index": 1}, sandbox_fusion_url=None) == 1.0
    with pytest.raises(NotImplementedError, match=r"data_source='my/data'.*known sources.*arithmetic"):
        default_compute_score("my/data", "x", "y")


def test_upstreams_math_reward_module_name_and_boxed_helpers() -> None:
    """verl-recipe's char_count scorer: `from verl.utils.reward_score import math_reward` (upstream v0.9's name of
    the MATH scorer module), then its last_boxed_only_string / remove_boxed."""
    import pytest

    from verl.rewards import math as here
    from verl.utils.reward_score import math_reward

    assert math_reward is here
    assert math_reward.last_boxed_only_string("so \\boxed{\\frac{1}{2}} done") == "\\boxed{\\frac{1}{2}}"
    assert math_reward.last_boxed_only_string("a \\boxed{1} then \\fbox{2}") == "\\fbox{2}"
    assert math_reward.last_boxed_only_string("\\boxed 5$") == "\\boxed 5"
    assert math_reward.last_boxed_only_string("no box") is None
    assert (
        math_reward.remove_boxed("\\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
        and math_reward.remove_boxed("\\boxed 5") == "5"
    )
    with pytest.raises(ValueError, match="is not a"):
        math_reward.remove_boxed("42")


def test_an_async_custom_reward_function_is_awaited_in_the_trainer_and_in_worker_processes(tmp_path) -> None:
    """Upstream v0.9's reward loop awaits `async def compute_score` (verl-recipe's FAPO / GenRM scorers)."""
    import pickle

    from verl.trainer.ppo.reward import get_custom_reward_fn, takes_batch
    from verl.utils.ray_utils import get_event_loop

    path = tmp_path / "async_score.py"
    path.write_text(
        "import asyncio\n\n\n"
        "async def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0):\n"
        "    await asyncio.sleep(0)\n    return float(solution_str == ground_truth) + bonus\n"
    )
    config = {"custom_reward_function": {"path": str(path), "name": "compute_score", "reward_kwargs": {"bonus": 1}}}
    fn = get_custom_reward_fn(config)
    assert fn("d", "4", "4") == 2.0 and fn("d", "5", "4") == 1.0 and not takes_batch(fn)

    async def inside_a_running_loop() -> float:
        return fn("d", "4", "4")

    assert get_event_loop().run_until_complete(inside_a_running_loop()) == 2.0
    assert get_event_loop() is get_event_loop()
    config["custom_reward_function"]["reward_kwargs"] = {}
    assert pickle.loads(pickle.dumps(get_custom_reward_fn(config)))("d", "4", "4") == 1.0
