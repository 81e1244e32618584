"""verl.interactions: the upstream interaction-config format and the GSM8K interaction."""

from __future__ import annotations

import asyncio

import pytest

from verl.interactions.utils.interaction_registry import initialize_interactions_from_config

# verl's examples/sglang_multiturn/config/interaction_config/gsm8k_interaction_config.yaml
UPSTREAM = """\
interaction:
  - name: "gsm8k"
    class_name: "verl.interactions.gsm8k_interaction.Gsm8kInteraction"
    config: {}
"""


def test_upstream_interaction_config_and_feedback_loop(tmp_path) -> None:
    path = tmp_path / "gsm8k_interaction_config.yaml"
    path.write_text(UPSTREAM)
    interactions = initialize_interactions_from_config(str(path))
    assert list(interactions) == ["gsm8k"]
    gsm8k = interactions["gsm8k"]

    async def episode() -> tuple:
        iid = await gsm8k.start_interaction(ground_truth="18")
        wrong = await gsm8k.generate_response(iid, [{"role": "assistant", "content": "The answer is #### 17"}])
        right = await gsm8k.generate_response(iid, [{"role": "assistant", "content": "So it is 18."}])
        score = await gsm8k.calculate_score(iid)
        await gsm8k.finalize_interaction(iid)
        return wrong, right, score

    wrong, right, score = asyncio.run(episode())
    assert wrong[:3] == (False, "Your response is incorrect! You need to reflect on your answer and try again.", 0.0)
    assert right[:3] == (True, "Your response is correct!", 1.0)
    assert score == 1.0


def test_default_name_and_errors(tmp_path) -> None:
    path = tmp_path / "i.yaml"
    path.write_text("interaction:\n  - class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction\n")
    assert list(initialize_interactions_from_config(str(path))) == ["gsm8k"]
    path.write_text(
        "interaction:\n  - class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction\n"
        "    config: {method: loose}\n"
    )
    with pytest.raises(ValueError, match=r"interaction\[0\].*method='loose'"):
        initialize_interactions_from_config(str(path))
    path.write_text("interaction:\n  - class_name: verl.tools.calculator_tool.CalculatorTool\n")
    with pytest.raises(ValueError, match="is not a subclass of BaseInteraction"):
        initialize_interactions_from_config(str(path))
    path.write_text("tools: []\n")
    with pytest.raises(ValueError, match="expected a top-level 'interaction:' list"):
        initialize_interactions_from_config(str(path))
