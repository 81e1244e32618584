"""Checks of rollout.multi_turn.* and rollout.agent.*: accepted values, errors naming the key, the fix."""

from __future__ import annotations

import warnings

import pytest

from verl.trainer.config import ConfigError, ConfigWarning, load_config

MT = "actor_rollout_ref.rollout.multi_turn"
AGENT = "actor_rollout_ref.rollout.agent"


def test_multi_turn_keys_load_with_upstream_names(tmp_path) -> None:
    tools = tmp_path / "tools.yaml"
    tools.write_text("tools: []\n")
    cfg = load_config(
        [
            "actor_rollout_ref.rollout.name=hf",
            "data.return_raw_chat=true",
            f"{MT}.enable=true",
            f"{MT}.max_assistant_turns=5",
            f"{MT}.max_user_turns=2",
            f"{MT}.max_parallel_calls=4",
            f"{MT}.max_tool_response_length=512",
            f"{MT}.tool_response_truncate_side=left",
            f"{MT}.tool_config_path={tools}",
            f"{MT}.format=gpt-oss",
            f"{MT}.tokenization_sanity_check_mode=ignore_strippable",
            f"{AGENT}.num_workers=2",
            f"{AGENT}.default_agent_loop=tool_agent",
        ]
    )
    mt = cfg.actor_rollout_ref.rollout.multi_turn
    assert (mt.max_assistant_turns, mt.max_parallel_calls, mt.format) == (5, 4, "gpt-oss")
    assert cfg.actor_rollout_ref.rollout.agent.num_workers == 2


def test_bad_multi_turn_values_are_errors_naming_the_key(tmp_path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(
            [
                "actor_rollout_ref.rollout.name=vllm",
                f"{MT}.enable=true",
                f"{MT}.max_parallel_calls=0",
                f"{MT}.max_assistant_turns=0",
                f"{MT}.format=xml",
                f"{MT}.interaction_config_path={tmp_path / 'missing.yaml'}",
                f"{AGENT}.default_agent_loop=mine",
            ]
        )
    problems = "\n".join(info.value.problems)
    assert f"{MT}.max_parallel_calls=0 must be >= 1" in problems
    assert f"{MT}.max_assistant_turns=0 must be null (no limit) or an integer >= 1" in problems
    assert f"{MT}.format='xml' is unknown; known formats: ['gpt-oss', 'hermes', 'kimi']" in problems
    assert f"{MT}.interaction_config_path='{tmp_path / 'missing.yaml'}': no such file" in problems
    assert f"{AGENT}.default_agent_loop='mine' is not a registered agent loop" in problems
    assert "rollout.name" not in problems  # agent loops run on vLLM too
    assert "set data.return_raw_chat=true" in problems


def test_tool_config_without_enable_is_a_warning(tmp_path) -> None:
    tools = tmp_path / "tools.yaml"
    tools.write_text("tools: []\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        load_config([f"{MT}.tool_config_path={tools}"])
    notices = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]
    assert any(f"set while {MT}.enable=false" in n for n in notices), notices


def test_openai_agent_keys_are_checked_at_start() -> None:
    base = ["actor_rollout_ref.rollout.name=hf", "data.return_raw_chat=true", f"{MT}.enable=true"]
    cfg = load_config([*base, f"{AGENT}.default_agent_loop=openai_agent", f"{AGENT}.openai.agent=my_agent.py:run"])
    assert cfg.actor_rollout_ref.rollout.agent.openai.agent == "my_agent.py:run"
    with pytest.raises(ConfigError) as info:
        load_config([*base, f"{AGENT}.default_agent_loop=openai_agent", f"{AGENT}.openai.reward=judge"])
    problems = "\n".join(info.value.problems)
    assert f"{AGENT}.openai: set exactly one of agent (module:function) and command" in problems
    assert (
        f"{AGENT}.openai.reward=judge needs the judge as the reward: set reward_model.reward_manager=judge" in problems
    )


TRACE = "actor_rollout_ref.rollout.trace"


def test_trace_defaults_load_and_a_backend_is_refused_in_one_line() -> None:
    cfg = load_config([f"{TRACE}.backend=null", f"{TRACE}.token2text=False"])  # January's script, as written
    assert cfg.actor_rollout_ref.rollout.trace.backend is None
    for override, needle in (
        (f"{TRACE}.backend=mlflow", f"{TRACE}.backend=mlflow: rollout tracing is not implemented here"),
        (f"{TRACE}.token2text=True", f"{TRACE}.token2text=True: only applies with a trace backend"),
        (f"{TRACE}.max_samples_per_step_per_worker=5", f"{TRACE}.max_samples_per_step_per_worker=5: only applies"),
    ):
        with pytest.raises(ConfigError) as info:
            load_config([override])
        lines = [ln for ln in str(info.value).splitlines() if TRACE in ln]
        assert len(lines) == 1 and needle in lines[0] and "trainer.rollout_data_dir" in lines[0]
