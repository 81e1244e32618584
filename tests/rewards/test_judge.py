"""LLM judge: templates and parsers, the OpenAI-compatible backend against a scripted server on 127.0.0.1
(scores, parse failures, on_error, bounded concurrency), the in-process hf backend with a scripted tiny model,
and the ``judge`` reward manager (weights with the rule reward, extras, pairwise GRPO groups)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.rewards.judge import (
    JudgeError,
    JudgeParseError,
    LLMJudge,
    OpenAIJudgeBackend,
    pairwise_parser,
    pointwise_parser,
)
from verl.rewards.judge.templates import check_template
from verl.workers.judge_worker import HFJudgeBackend

# the scripted endpoint: the ``judge_server`` fixture of tests/conftest.py (also used by the agent-loop tests)


def _backend(url: str, **kw) -> OpenAIJudgeBackend:
    return OpenAIJudgeBackend(url, model="tiny-judge", max_retries=0, timeout_s=10, **kw)


# ------------------------------------------------------------------------------------------ templates, parsers
def test_pointwise_parser_normalises_and_rejects():
    parse = pointwise_parser()
    assert parse("ok. Rating: [[7]]") == pytest.approx(0.7)
    assert parse("score: 4.5") == pytest.approx(0.45)
    assert parse("I give it 9/10") == pytest.approx(0.9)
    with pytest.raises(JudgeParseError, match="no score"):
        parse("no digits here")
    with pytest.raises(JudgeParseError, match="outside"):
        parse("[[12]]")
    assert pointwise_parser(r"grade=(\d)", max_score=5)("grade=4") == pytest.approx(0.8)
    with pytest.raises(ValueError, match="capturing group"):
        pointwise_parser(r"\d+")


def test_pairwise_parser_and_template_checks():
    parse = pairwise_parser()
    assert parse("A is clearer. [[A]]") == 1.0 and parse("[[B]]") == 0.0
    with pytest.raises(JudgeParseError):
        parse("tie")
    with pytest.raises(ValueError, match="unknown placeholder.*answer"):
        check_template("{prompt} {answer}", "pointwise")
    with pytest.raises(ValueError, match="must contain.*response_b"):
        check_template("{prompt} {response_a}", "pairwise")
    with pytest.raises(ValueError, match="on_error"):
        LLMJudge(_backend("http://127.0.0.1:1"), on_error="ignore")


# ---------------------------------------------------------------------------------------------- openai backend
def test_pointwise_scores_failures_and_on_error(judge_server):
    judge = LLMJudge(_backend(judge_server["url"]), on_error="zero")
    prompts = ["q"] * 5
    responses = ["good answer", "bad answer", "unparsable", "fail", "toolarge"]
    results = judge.score(prompts, responses)
    assert [r.score for r in results] == pytest.approx([0.8, 0.2, 0.0, 0.0, 0.0])
    assert [r.parse_failures for r in results] == [0, 0, 1, 0, 1]
    assert [r.request_failures for r in results] == [0, 0, 0, 1, 0]
    assert all(r.latency_s > 0 for r in results)
    body = judge_server["bodies"][0]
    assert body["model"] == "tiny-judge" and body["temperature"] == 0.0
    assert "[Question]\nq" in body["messages"][0]["content"]

    skip = LLMJudge(_backend(judge_server["url"]), on_error="skip").score(prompts, responses)
    assert [r.score for r in skip] == [pytest.approx(0.8), pytest.approx(0.2), None, None, None]
    with pytest.raises(JudgeError, match="sample 2.*on_error=raise.*no score"):
        LLMJudge(_backend(judge_server["url"]), on_error="raise").score(prompts, responses)


def test_requests_run_concurrently_up_to_the_bound(judge_server):
    judge_server["delay"] = 1.0  # long enough for all twelve to be in flight together even on a loaded machine
    judge = LLMJudge(_backend(judge_server["url"], max_concurrency=12))
    judge.score(["q"] * 12, ["good"] * 12)  # more in flight than asyncio's default thread pool holds on 2 CPUs
    assert judge_server["max_in_flight"] == 12
    judge_server["max_in_flight"], judge_server["delay"] = 0, 0.3
    judge = LLMJudge(_backend(judge_server["url"], max_concurrency=3))
    start = time.perf_counter()
    results = judge.score(["q"] * 6, ["good"] * 6)
    elapsed = time.perf_counter() - start
    assert [r.score for r in results] == pytest.approx([0.8] * 6)
    # three at once (concurrent, and no more than the bound): at least two waves of 0.3 s
    assert judge_server["max_in_flight"] == 3
    assert elapsed > 0.55


def test_pairwise_within_groups_both_orders(judge_server):
    judge = LLMJudge(_backend(judge_server["url"]), mode="pairwise", template="{prompt} A:{response_a}|B:{response_b}")
    responses = ["bad one", "good one", "bad two", "alone"]
    results = judge.score(["q"] * 4, responses, group_ids=["g", "g", "g", "h"])
    # good wins all four of its comparisons; each bad loses both to good and wins one of the two against the other
    # bad (the scripted judge prefers A between equals); a group of one is neutral
    assert [r.score for r in results] == pytest.approx([0.25, 1.0, 0.25, 0.5])
    assert judge_server["requests"] == 6
    with pytest.raises(ValueError, match="group id"):
        judge.score(["q"], ["x"])


# -------------------------------------------------------------------------------------------------- hf backend
class _ScriptedJudgeLM(torch.nn.Module):
    """A causal LM over byte ids whose greedy answer (after the byte chat template's ``<|assistant|>`` turn)
    spells ``[[9]]`` when the sequence contains ``good`` and ``[[2]]`` otherwise, then EOS."""

    def __init__(self, eos_id: int, vocab: int) -> None:
        super().__init__()
        self.eos_id, self.vocab = eos_id, vocab
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # a device/dtype for the engine

    def forward(self, input_ids, attention_mask=None, **kwargs):
        marker = list(b"<|assistant|>")
        logits = torch.zeros(*input_ids.shape, self.vocab)
        for row, ids in enumerate(input_ids.tolist()):
            text = bytes(t for t in ids if t < 256)
            target = list(b"[[9]]" if b"good" in text else b"[[2]]") + [self.eos_id]
            end = max(i + len(marker) for i in range(len(ids)) if ids[i : i + len(marker)] == marker)
            written = len(ids) - end
            logits[row, -1, target[min(written, len(target) - 1)]] = 10.0
        return logits


def test_hf_backend_in_process_judge():
    from verl.models.tiny import make_byte_tokenizer

    tok = make_byte_tokenizer()
    module = _ScriptedJudgeLM(tok.eos_token_id, len(tok))
    backend = HFJudgeBackend(module, tok, max_new_tokens=8, max_num_seqs=2)
    judge = LLMJudge(backend, template="Q {prompt} R {response} VERDICT:")
    results = judge.score(["2+2", "2+2", "2+3"], ["good 4", "bad 5", "good"])
    assert [r.score for r in results] == pytest.approx([0.9, 0.2, 0.9])


# --------------------------------------------------------------------------------------- judge reward manager
def _batch(tok, responses, uids=None, ground_truths=None) -> DataProto:
    prompt_len, resp_len = 4, 12
    bs = len(responses)
    p_ids = torch.full((bs, prompt_len), tok.pad_token_id)
    r_ids = torch.full((bs, resp_len), tok.pad_token_id)
    mask = torch.zeros((bs, prompt_len + resp_len), dtype=torch.long)
    for i, r in enumerate(responses):
        rb = (list(r.encode()) + [tok.eos_token_id])[:resp_len]
        p_ids[i, -1] = ord("q")
        r_ids[i, : len(rb)] = torch.tensor(rb)
        mask[i, prompt_len - 1 : prompt_len + len(rb)] = 1
    non_tensors = {
        "data_source": np.array(["chat"] * bs, dtype=object),
        "reward_model": np.array([{"ground_truth": g} for g in (ground_truths or ["x"] * bs)], dtype=object),
    }
    if uids is not None:
        non_tensors["uid"] = np.array(uids, dtype=object)
    tensors = {"prompts": p_ids, "responses": r_ids, "input_ids": torch.cat([p_ids, r_ids], 1), "attention_mask": mask}
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)


def _rule(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if ground_truth in solution_str else 0.0


def test_reward_manager_weights_extras_and_skip(judge_server):
    from verl.models.tiny import make_byte_tokenizer
    from verl.workers.reward_manager import get_reward_manager_cls

    tok = make_byte_tokenizer()
    cls = get_reward_manager_cls("judge")
    cfg = {"url": judge_server["url"], "max_retries": 0, "on_error": "skip", "weight": 2.0, "rule_weight": 0.5}
    manager = cls(tok, 0, judge_config=cfg, compute_score=_rule, num_workers=0)
    data = _batch(tok, ["good x", "bad", "unparsable x"], ground_truths=["x", "x", "x"])
    out = manager(data, return_dict=True)
    rewards, info = out["reward_tensor"], out["reward_extra_info"]
    # last valid response token holds 2 * judge + 0.5 * rule; the skipped judge leaves the rule term alone
    assert rewards.sum(-1).tolist() == pytest.approx([2 * 0.8 + 0.5, 2 * 0.2, 0.5])
    assert rewards[0, len("good x")].item() == pytest.approx(2.1)  # EOS position
    assert info["judge_parse_failure"] == [0, 0, 1] and info["judge_skipped"] == [0, 0, 1]
    assert info["rule_score"] == [1.0, 0.0, 1.0] and np.isnan(info["judge_score"][2])
    assert info["reward/judge_parse_failures"] == [1] and info["reward/judge_request_failures"] == [0]


def test_reward_manager_pairwise_uses_uid_and_loads_from_config(judge_server):
    from omegaconf import OmegaConf

    from verl.models.tiny import make_byte_tokenizer
    from verl.trainer.ppo.reward import check_reward_endpoints, load_reward_manager
    from verl.workers.reward_manager import JudgeRewardManager

    tok = make_byte_tokenizer()
    config = OmegaConf.create(
        {
            "reward_model": {
                "reward_manager": "judge",
                "judge": {
                    "url": judge_server["url"],
                    "mode": "pairwise",
                    "template": "{prompt} A:{response_a}|B:{response_b}",
                    "max_retries": 0,
                },
            }
        }
    )
    check_reward_endpoints(config)
    manager = load_reward_manager(config, tok, num_examine=0)
    assert isinstance(manager, JudgeRewardManager) and manager.judge.mode == "pairwise"
    rewards = manager(_batch(tok, ["good", "bad", "bad", "good"], uids=["u1", "u1", "u2", "u2"]))
    assert rewards.sum(-1).tolist() == pytest.approx([1.0, 0.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="uid"):
        manager(_batch(tok, ["good"]))


def test_judge_defaults_have_one_home() -> None:
    """The judge's constructors default to JudgeConfig's fields, and build_judge completes a partial section from it."""
    import inspect

    from verl.rewards.judge import LLMJudge, OpenAIJudgeBackend
    from verl.workers.config import JudgeConfig
    from verl.workers.reward_manager.judge import build_judge

    defaults = JudgeConfig()
    for cls in (LLMJudge, OpenAIJudgeBackend):
        for name, param in inspect.signature(cls.__init__).parameters.items():
            # model: null in the section means "no name", which the OpenAI request sends as "judge"
            if name in JudgeConfig.__dataclass_fields__ and name != "model" and param.default is not param.empty:
                assert param.default == getattr(defaults, name), (cls.__name__, name)
    judge = build_judge({"url": "http://127.0.0.1:1/v1", "mode": "pairwise"})
    assert judge.mode == "pairwise" and (judge.on_error, judge.both_orders) == (defaults.on_error, defaults.both_orders)
    assert judge.backend.max_concurrency == defaults.max_concurrency and judge.backend.timeout_s == defaults.timeout_s
