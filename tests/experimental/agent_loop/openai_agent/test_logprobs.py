"""``logprobs`` in the endpoint's answers (OpenAI's chat and completions formats): the log-probs the engine
recorded for the ids it sampled; alternatives (``top_logprobs``) are refused, naming the field."""

from __future__ import annotations

import os
from typing import Any

import pytest

from verl.base_config import omega_conf_to_dataclass
from verl.experimental.agent_loop.runner import AgentLoopRunner
from verl.models.tiny import make_byte_tokenizer, make_tiny_causal_lm
from verl.protocol import DataProto
from verl.workers.config import RolloutConfig

pytest.importorskip("openai")  # the agents extra (in dev)

AGENTS = os.path.join(os.path.dirname(__file__), "agents_for_tests.py")


def test_logprobs_are_the_engine_s_recorded_log_probs(kit) -> None:
    from omegaconf import OmegaConf

    from verl.experimental.agent_loop.openai_agent.loop import _AGENTS
    from verl.workers.rollout.hf_rollout import HFRollout

    tok = make_byte_tokenizer()
    engine_config = OmegaConf.create({"name": "hf", "temperature": 1.0, "top_p": 1.0, "top_k": -1, "do_sample": True,
                                      "prompt_length": 64, "response_length": 6, "min_new_tokens": 0,
                                      "dtype": "float32", "max_num_seqs": 8, "calculate_log_probs": True,
                                      "seed": 0})  # fmt: skip
    engine = HFRollout(make_tiny_causal_lm(seed=0), engine_config, tokenizer=tok)
    sampled: list[tuple[list[int], list[float]]] = []

    def generate(prompts: DataProto) -> DataProto:
        out = engine.generate_sequences(prompts)
        n = int(out.batch["response_mask"][0].sum())
        sampled.append((out.batch["responses"][0, :n].tolist(), out.batch["rollout_log_probs"][0, :n].tolist()))
        return out

    spec = f"{AGENTS}:asks_logprobs"
    config = kit.rollout_config(agent_default_agent_loop="openai_agent", response_length=64,
                                agent_openai={"agent": spec, "on_failure": "score"})  # fmt: skip
    config = omega_conf_to_dataclass(config, RolloutConfig)
    AgentLoopRunner(config, tok, generate).generate_sequences(kit.prompt_batch(tok, ["hello"]))
    got: dict[str, Any] = _AGENTS[spec].__globals__["LOGPROBS"]
    assert len(sampled) == 2  # the refused request never reached the engine

    def expected(ids: list[int], lps: list[float]) -> list[tuple[str, float]]:
        n = len(ids) - 1 if ids[-1] == tok.eos_token_id else len(ids)  # a closing EOS is not part of the text
        return [(tok.decode([i]), lp) for i, lp in zip(ids[:n], lps[:n])]

    def same(answer: list[tuple[str, float]], want: list[tuple[str, float]]) -> bool:
        return [t for t, _ in answer] == [t for t, _ in want] and [lp for _, lp in answer] == pytest.approx(
            [lp for _, lp in want], abs=1e-6
        )

    chat = [(e["token"], e["logprob"]) for e in got["chat"]["content"]]
    assert chat and same(chat, expected(*sampled[0]))
    assert all(e["bytes"] == list(e["token"].encode()) and e["top_logprobs"] == [] for e in got["chat"]["content"])
    plain = got["completion"]
    assert same(list(zip(plain["tokens"], plain["token_logprobs"])), expected(*sampled[1]))
    assert plain["text_offset"] == [len("".join(plain["tokens"][:i])) for i in range(len(plain["tokens"]))]
    assert "top_logprobs" in got["refused"] and "sampled token" in got["refused"]
