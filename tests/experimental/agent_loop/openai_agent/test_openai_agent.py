"""The openai_agent loop: agents written with the openai SDK talk to the rollout through a loopback endpoint; the
trajectory holds the sampled ids exactly, splits where the agent rewrites history, and bad agents fail alone."""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest
import torch

from verl.base_config import omega_conf_to_dataclass
from verl.experimental.agent_loop.chat import encode_appended
from verl.experimental.agent_loop.runner import AgentLoopRunner
from verl.models.tiny import make_byte_tokenizer, make_tiny_causal_lm
from verl.protocol import DataProto
from verl.workers.config import RolloutConfig

pytest.importorskip("openai")  # the agents extra (in dev): the test agents are written with the openai SDK

AGENTS = os.path.join(os.path.dirname(__file__), "agents_for_tests.py")
CALC = '<tool_call>{"name": "calculator", "arguments": {"expression": "12*34"}}</tool_call>'


def _config(kit: Any, response_length: int = 256, **openai: Any) -> Any:
    config = kit.rollout_config(agent_default_agent_loop="openai_agent", agent_openai=openai,
                                response_length=response_length)  # fmt: skip
    return omega_conf_to_dataclass(config, RolloutConfig)


def _rows(out: DataProto, i: int) -> tuple[list[int], list[int], list[int]]:
    """(prompt ids, response ids, response mask) of row ``i`` without padding."""
    width = out.batch["responses"].shape[1]
    attn = out.batch["attention_mask"][i]
    prompt = out.batch["prompts"][i][attn[:-width].bool()].tolist()
    n = int(attn[-width:].sum())
    return prompt, out.batch["responses"][i, :n].tolist(), out.batch["response_mask"][i, :n].tolist()


def test_three_turns_with_the_openai_sdk_record_exactly_the_sampled_ids(kit) -> None:
    """A random tiny model samples arbitrary bytes (text that does not re-tokenize to the same ids); the trained
    tokens are the ids the engine sampled, turn by turn, with their log-probs."""
    from omegaconf import OmegaConf

    from verl.workers.rollout.hf_rollout import HFRollout

    tok = make_byte_tokenizer()
    engine_config = OmegaConf.create({"name": "hf", "temperature": 1.0, "top_p": 1.0, "top_k": -1, "do_sample": True,
                                      "prompt_length": 64, "response_length": 8, "min_new_tokens": 0,
                                      "dtype": "float32", "max_num_seqs": 8, "calculate_log_probs": True,
                                      "seed": 0})  # fmt: skip
    engine = HFRollout(make_tiny_causal_lm(seed=0), engine_config, tokenizer=tok)
    sampled: list[tuple[list[int], list[float]]] = []

    def generate(prompts: DataProto) -> DataProto:
        out = engine.generate_sequences(prompts)
        n = int(out.batch["response_mask"][0].sum())
        sampled.append((out.batch["responses"][0, :n].tolist(), out.batch["rollout_log_probs"][0, :n].tolist()))
        return out

    config = _config(kit, response_length=128, agent=f"{AGENTS}:three_turns")
    batch = kit.prompt_batch(tok, ["hello"])
    out = AgentLoopRunner(config, tok, generate).generate_sequences(batch)

    assert len(sampled) == 3
    prompt, ids, mask = _rows(out, 0)
    assert prompt == tok.encode(
        tok.apply_chat_template([{"role": "user", "content": "hello"}], add_generation_prompt=True, tokenize=False),
        add_special_tokens=False,
    )
    expected_ids, expected_mask, expected_lp = [], [], []
    for turn, (turn_ids, turn_lp) in enumerate(sampled):
        expected_ids += turn_ids
        expected_mask += [1] * len(turn_ids)
        expected_lp += turn_lp
        if turn < 2:
            closing = [] if turn_ids[-1] == tok.eos_token_id else [tok.eos_token_id]
            tail = closing + encode_appended(tok, [{"role": "user", "content": f"go on {turn}"}])
            expected_ids += tail
            expected_mask += [0] * len(tail)
            expected_lp += [0.0] * len(tail)
    assert ids == expected_ids and mask == expected_mask
    # what a re-tokenizing endpoint would have trained on instead: the agent's text differs from the sampled ids
    retokenized = [tok.encode(tok.decode(t, skip_special_tokens=True), add_special_tokens=False) for t, _ in sampled]
    assert any(r != [x for x in t if x != tok.eos_token_id] for r, (t, _) in zip(retokenized, sampled))
    torch.testing.assert_close(out.batch["rollout_log_probs"][0, : len(ids)], torch.tensor(expected_lp))
    assert out.non_tensor_batch["agent_reward"][0] == 1.0
    metrics = out.non_tensor_batch["agent_metrics"][0]
    assert (metrics["openai/requests"], metrics["openai/splits"], metrics["openai/failed"]) == (3, 0, 0)
    assert metrics["assistant_turns"] == 3


def test_a_rewritten_history_splits_the_trajectory_into_one_row_per_segment(kit) -> None:
    """``train_segments: all`` (the default): each segment is its own row (its own context; the sampled ids mask 1,
    the rest mask 0), the trajectory's reward on each, the session columns naming them; ``last``: the last only."""
    tok = kit.chat_tokenizer()
    engine = kit.ScriptedEngine(tok, {"Q1": ["first", "second", "third"]})
    config = _config(kit, agent=f"{AGENTS}:rewrites_history")
    out = AgentLoopRunner(config, tok, engine).generate_sequences(kit.prompt_batch(tok, ["Q1 task"]))
    assert len(out) == 2
    eos = [tok.eos_token_id]
    # row 0, the first segment: the task, two answers around the agent's "more" (mask 0)
    prompt, ids, mask = _rows(out, 0)
    task = [{"role": "user", "content": "Q1 task"}]
    assert prompt == tok.encode(tok.apply_chat_template(task, add_generation_prompt=True, tokenize=False),
                                add_special_tokens=False)  # fmt: skip
    first, second = (tok.encode(t, add_special_tokens=False) + eos for t in ("first", "second"))
    more = encode_appended(tok, [{"role": "user", "content": "more"}])
    assert ids == first + more + second and mask == [1] * len(first) + [0] * len(more) + [1] * len(second)
    # row 1, the third request started over from a summary: its own prompt, and the model's answer to it
    prompt, ids, mask = _rows(out, 1)
    summary = [{"role": "user", "content": "Q1 task (summary)"}]
    text = tok.apply_chat_template(summary, add_generation_prompt=True, tokenize=False)
    assert prompt == tok.encode(text, add_special_tokens=False)
    assert ids == tok.encode("first", add_special_tokens=False) + eos and mask == [1] * len(ids)
    assert list(out.non_tensor_batch["session_id"]) == [0, 0]
    assert list(out.non_tensor_batch["segment_index"]) == [0, 1]
    assert list(out.non_tensor_batch["segment_count"]) == [2, 2]
    assert list(out.non_tensor_batch["agent_reward"]) == [0.5, 0.5]  # the trajectory's reward on every row
    metrics = out.non_tensor_batch["agent_metrics"][1]
    assert (metrics["openai/segments"], metrics["openai/splits"], metrics["openai/requests"]) == (2, 1, 3)
    assert (metrics["openai/trained_segments"], metrics["openai/discarded_tokens"]) == (2, 0)

    config = _config(kit, agent=f"{AGENTS}:rewrites_history", train_segments="last")
    out = AgentLoopRunner(config, tok, engine).generate_sequences(kit.prompt_batch(tok, ["Q1 task"]))
    assert len(out) == 1 and _rows(out, 0)[0] == tok.encode(text, add_special_tokens=False)
    metrics = out.non_tensor_batch["agent_metrics"][0]
    assert (metrics["openai/trained_segments"], metrics["openai/splits"]) == (1, 1)
    # the first segment (two answers) is counted, not trained
    assert metrics["openai/discarded_tokens"] == len("first") + len("second") + 2
    assert list(out.non_tensor_batch["segment_count"]) == [1]


class _Judging:
    """A judge of one batch that records what it is given (``RolloutJudging``)."""

    def __init__(self, n: int) -> None:
        self.submitted: dict[int, list[int]] = {}
        self.n = n

    def submit(self, index: int, prompt_ids: list[int], response_ids: list[int]) -> None:
        self.submitted[index] = list(prompt_ids)

    def collect(self) -> dict[str, Any]:
        import numpy as np

        return {"judge_row": np.array([f"row {i}" for i in range(self.n)], dtype=object)}

    def close(self) -> None:
        pass


def test_the_judge_sees_the_final_segment_and_its_columns_reach_every_row(kit) -> None:
    tok = kit.chat_tokenizer()
    engine = kit.ScriptedEngine(tok, {"Q1": ["first", "second", "third"]})
    judgings: list[_Judging] = []

    class Judge:
        def open_batch(self, tokenizer: Any, ground_truths: list[Any]) -> _Judging:
            judgings.append(_Judging(len(ground_truths)))
            return judgings[-1]

    config = _config(kit, agent=f"{AGENTS}:rewrites_history")
    runner = AgentLoopRunner(config, tok, engine, judge=Judge())
    out = runner.generate_sequences(kit.prompt_batch(tok, ["Q1 task"]))
    assert list(out.non_tensor_batch["judge_row"]) == ["row 0", "row 0"]
    assert judgings[0].submitted == {0: _rows(out, 1)[0]}  # the final row's prompt: the summary request


def test_a_failure_applies_to_every_segment(kit) -> None:
    """``score``: every segment's row is kept with ``failure_score``; ``drop``: the trajectory is one mask-0 row."""
    tok = kit.chat_tokenizer()
    engine = kit.ScriptedEngine(tok, {"Q1": ["first"]})
    config = _config(kit, agent=f"{AGENTS}:splits_then_raises", on_failure="score", failure_score=-1.0)
    out = AgentLoopRunner(config, tok, engine).generate_sequences(kit.prompt_batch(tok, ["Q1 task"]))
    assert len(out) == 2 and list(out.non_tensor_batch["agent_reward"]) == [-1.0, -1.0]
    assert all(sum(_rows(out, i)[2]) == len("first") + 1 for i in range(2))
    assert out.non_tensor_batch["agent_metrics"][1]["openai/failure_reason"] == "raised"
    config = _config(kit, agent=f"{AGENTS}:splits_then_raises", on_failure="drop")
    out = AgentLoopRunner(config, tok, engine).generate_sequences(kit.prompt_batch(tok, ["Q1 task"]))
    assert len(out) == 1 and out.non_tensor_batch["agent_reward"][0] == 0.0 and sum(_rows(out, 0)[2]) == 0
    metrics = out.non_tensor_batch["agent_metrics"][0]
    assert (metrics["openai/trained_segments"], metrics["openai/splits"], metrics["openai/dropped"]) == (0, 1, 1)


def _mode_batch(tok: Any, kit: Any, modes: list[str]) -> DataProto:
    return kit.prompt_batch(tok, [f"Q{i} {m}" for i, m in enumerate(modes)], [{"mode": m} for m in modes])


def test_bad_agents_fail_alone_dropped_or_scored(kit, caplog) -> None:
    modes = ["ok", "raise", "hang", "malformed", "over_budget", "silent", "not_a_number"]
    tok = kit.chat_tokenizer()
    engine = kit.ScriptedEngine(tok, {f"Q{i}": ["a", "b", "c"] for i in range(len(modes))})
    config = _config(kit, agent=f"{AGENTS}:misbehaves", timeout_s=3.0, max_requests=2)
    with caplog.at_level(logging.WARNING):
        out = AgentLoopRunner(config, tok, engine).generate_sequences(_mode_batch(tok, kit, modes))
    metrics = list(out.non_tensor_batch["agent_metrics"])
    reasons = [m["openai/failure_reason"] for m in metrics]
    expected = [None, "raised", "timeout", "bad_request", "request_budget", "no_requests", "bad_result"]
    assert reasons == expected
    assert [m["openai/dropped"] for m in metrics] == [0, 1, 1, 1, 1, 1, 1]
    # dropped rows: the prompt and one EOS token, mask 0; the good row trains on its answer with its reward
    for i in range(1, len(modes)):
        _, ids, mask = _rows(out, i)
        assert ids == [tok.eos_token_id] and mask == [0]
    _, ids, mask = _rows(out, 0)
    assert ids == tok.encode("a", add_special_tokens=False) + [tok.eos_token_id] and mask == [1, 1]
    assert list(out.non_tensor_batch["agent_reward"]) == [1.0] + [0.0] * 6
    lines = [r.getMessage() for r in caplog.records if "openai_agent: task" in r.getMessage()]
    assert len(lines) == 6 and any("index=2 'Q2 hang'" in line and "timeout" in line for line in lines)

    scored = _config(kit, agent=f"{AGENTS}:misbehaves", max_requests=2, on_failure="score", failure_score=-1.0)
    out = AgentLoopRunner(scored, tok, engine).generate_sequences(_mode_batch(tok, kit, ["over_budget", "silent"]))
    assert list(out.non_tensor_batch["agent_reward"]) == [-1.0, -1.0]
    _, ids, mask = _rows(out, 0)  # kept: the two answers it got before the third request was refused
    assert sum(mask) == 4 and [m["openai/dropped"] for m in out.non_tensor_batch["agent_metrics"]] == [0, 1]


def test_concurrent_trajectories_have_their_own_endpoint_and_key(kit) -> None:
    from verl.experimental.agent_loop.openai_agent.loop import _AGENTS

    tok = kit.chat_tokenizer()
    engine = kit.ScriptedEngine(tok, {"Q1": ["one"], "Q2": ["two"]}, delay_s=0.05)
    spec = f"{AGENTS}:records_its_endpoint"
    out = AgentLoopRunner(_config(kit, agent=spec), tok, engine).generate_sequences(kit.prompt_batch(tok, ["Q1", "Q2"]))
    seen = _AGENTS[spec].__globals__["SEEN"]
    assert seen[0]["api_key"] != seen[1]["api_key"] and seen[0]["base_url"] != seen[1]["base_url"]
    assert all(v["base_url"].startswith("http://127.0.0.1:") for v in seen.values())
    assert seen[0]["wrong_key_status"] == seen[1]["wrong_key_status"] == "401"
    assert (seen[0]["answer"], seen[1]["answer"]) == ("one", "two")
    for i, word in enumerate(["one", "two"]):
        _, ids, _ = _rows(out, i)
        assert ids == tok.encode(word, add_special_tokens=False) + [tok.eos_token_id]
    # the other agent's wrong-key request did not fail this trajectory
    assert [m["openai/failed"] for m in out.non_tensor_batch["agent_metrics"]] == [0, 0]


def test_streaming_tool_calls_n_stop_completions_and_models(kit) -> None:
    tok = kit.chat_tokenizer()
    engine = kit.ScriptedEngine(tok, {"Q1": [CALC, "The answer is 408"], "Q9": ["xyz"]})
    config = _config(kit, agent=f"{AGENTS}:api_tour")
    out = AgentLoopRunner(config, tok, engine).generate_sequences(kit.prompt_batch(tok, ["Q1: 12*34?"]))
    metrics = out.non_tensor_batch["agent_metrics"][0]
    assert metrics["openai/failed"] == 0, metrics
    assert (metrics["openai/segments"], metrics["openai/unused_choices"], metrics["openai/requests"]) == (2, 1, 3)
    _, ids, mask = _rows(out, len(out) - 1)  # the final segment (the other one, Q9's, is row 0)
    eos = tok.eos_token_id
    call = tok.encode(CALC, add_special_tokens=False) + [eos]
    tool = encode_appended(tok, [{"role": "tool", "content": "408"}])
    answer = tok.encode("The answer is", add_special_tokens=False)  # cut after the stop string's last token
    assert ids == call + tool + answer
    assert mask == [1] * len(call) + [0] * len(tool) + [1] * len(answer)


COMMAND_AGENT = """
import json, os, sys
import openai

task = json.loads(os.environ["VERL_AGENT_TASK"])
if task["extra_info"]["mode"] == "crash":
    sys.exit("agent crashed")
client = openai.OpenAI(max_retries=0)  # OPENAI_BASE_URL / OPENAI_API_KEY from the environment
r = client.chat.completions.create(model="policy", messages=task["messages"])
print("log line")
print(json.dumps({"reward": 0.25 if r.choices[0].message.content == "fine" else 0.0}))
"""


def test_a_command_agent_gets_the_endpoint_in_its_environment(kit, tmp_path) -> None:
    import sys

    script = tmp_path / "agent.py"
    script.write_text(COMMAND_AGENT)
    tok = kit.chat_tokenizer()
    engine = kit.ScriptedEngine(tok, {"Q0": ["fine"], "Q1": ["x"]})
    config = _config(kit, command=f"{sys.executable} {script}", timeout_s=60.0)
    out = AgentLoopRunner(config, tok, engine).generate_sequences(_mode_batch(tok, kit, ["ok", "crash"]))
    assert list(out.non_tensor_batch["agent_reward"]) == [0.25, 0.0]
    metrics = list(out.non_tensor_batch["agent_metrics"])
    assert metrics[0]["openai/failed"] == 0 and metrics[1]["openai/failure_reason"] == "exit_status"
    _, ids, mask = _rows(out, 0)
    assert ids == tok.encode("fine", add_special_tokens=False) + [tok.eos_token_id] and mask == [1] * len(ids)


def test_config_problems_name_the_key() -> None:
    from verl.experimental.agent_loop.openai_agent.loop import config_problems
    from verl.workers.config import OpenAIAgentConfig

    problems = config_problems(OpenAIAgentConfig())
    assert problems == [
        "actor_rollout_ref.rollout.agent.openai: set exactly one of agent (module:function) and command "
        "(got both or neither)"
    ]
    bad = OpenAIAgentConfig(agent="nocolon", timeout_s=0, max_requests=0, reward="judge")
    text = "; ".join(config_problems(bad, reward_manager="naive"))
    for key in ("openai.agent='nocolon'", "openai.timeout_s=0", "openai.max_requests=0", "reward_manager=judge"):
        assert key in text


def test_agent_source_is_checked_at_run_start_without_running_it(tmp_path, monkeypatch) -> None:
    """A missing agent file or module fails before any model loads, in one line naming the key; finding one runs
    none of its code."""
    from omegaconf import OmegaConf

    from verl.experimental.agent_loop.openai_agent.agents import agent_source_problem
    from verl.trainer.config import ConfigError, load_config
    from verl.trainer.config.multi_turn_checks import check_agent_source

    monkeypatch.chdir(tmp_path)
    loud = tmp_path / "loud_agent.py"
    loud.write_text("raise SystemExit('ran')\n")  # found, never executed
    assert agent_source_problem("loud_agent.py:run") is None
    assert agent_source_problem("json:loads") is None
    problem = agent_source_problem("my_pkg/my_agent.py:run")
    assert "agent.openai.agent='my_pkg/my_agent.py:run': no such file" in problem and str(tmp_path) in problem
    assert "no module 'json.nowhere'" in agent_source_problem("json.nowhere:run")
    assert "cannot import 'no_such_pkg.agent'" in agent_source_problem("no_such_pkg.agent:run")
    cfg = load_config(["actor_rollout_ref.rollout.multi_turn.enable=true",
                       "actor_rollout_ref.rollout.agent.openai.agent=my_pkg/my_agent.py:run"])  # fmt: skip
    with pytest.raises(ConfigError, match="no such file") as err:
        check_agent_source(cfg)
    assert "\n" not in str(err.value)
    OmegaConf.update(cfg, "actor_rollout_ref.rollout.agent.openai.agent", "loud_agent.py:run")
    check_agent_source(cfg)
    OmegaConf.update(cfg, "actor_rollout_ref.rollout.agent.openai.agent", "my_pkg/my_agent.py:run")
    OmegaConf.update(cfg, "actor_rollout_ref.rollout.multi_turn.enable", False)
    check_agent_source(cfg)  # no agent loops: the key is not read


def test_reward_sources_and_request_sampling(kit) -> None:
    """reward=reward_function: the loop adds nothing (the trainer's reward function scores the sample);
    request_sampling=false: a request's temperature is not an override."""
    tok = kit.chat_tokenizer()
    engine = kit.ScriptedEngine(tok, {"Q1": ["hot"]})
    batch = kit.prompt_batch(tok, ["Q1"])
    rows = {}
    for reward, own in (("agent", True), ("reward_function", False)):
        config = _config(kit, agent=f"{AGENTS}:hot_sampler", reward=reward, request_sampling=own)
        out = AgentLoopRunner(config, tok, engine).generate_sequences(batch)
        rows[reward] = (out.non_tensor_batch["agent_reward"][0], out.non_tensor_batch["agent_metrics"][0])
    assert rows["agent"][0] == 5.0 and rows["agent"][1]["openai/sampling_overrides"] == 1
    assert rows["reward_function"][0] == 0.0 and rows["reward_function"][1]["openai/sampling_overrides"] == 0


def test_protocol_edges_wrong_key_unknown_route_streamed_completion_bad_json(kit) -> None:
    tok = kit.chat_tokenizer()
    engine = kit.ScriptedEngine(tok, {"Q1": ["streamed"]})
    config = _config(kit, agent=f"{AGENTS}:protocol_edges", on_failure="score", failure_score=-0.5)
    out = AgentLoopRunner(config, tok, engine).generate_sequences(kit.prompt_batch(tok, ["Q1"]))
    metrics = out.non_tensor_batch["agent_metrics"][0]
    # the wrong key and the unknown route are refused without failing it; the body that is not JSON fails it
    assert metrics["openai/bad_requests"] == 3 and metrics["openai/failure_reason"] == "bad_request"
    assert out.non_tensor_batch["agent_reward"][0] == -0.5
    prompt, ids, mask = _rows(out, 0)  # kept (on_failure=score): the completion, prompt as the text's ids
    assert prompt == tok.encode("Q1 go", add_special_tokens=True)
    assert ids == tok.encode("streamed", add_special_tokens=False) + [tok.eos_token_id] and sum(mask) == len(ids)
