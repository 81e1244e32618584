"""Evaluators against a scripted actor worker group (so every expected number is worked out by hand), and the
pure diversity measures on hand-made strings."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from verl.api.evaluation import (
    AccuracyEvaluator,
    DiversityEvaluator,
    Evaluator,
    KLEvaluator,
    RewardEvaluator,
    distinct_n,
    ngram_entropy,
    ngrams,
    repetition_rate,
)
from verl.protocol import DataProto

RESPONSE_LEN = 8


# ------------------------------------------------------------------------------------------ pure functions
def test_ngrams_of_words_and_token_sequences():
    assert ngrams("a b c", 2) == [("a", "b"), ("b", "c")]
    assert ngrams([1, 2, 1], 1) == [(1,), (2,), (1,)]
    assert ngrams("a", 2) == []
    with pytest.raises(ValueError, match=">= 1"):
        ngrams("a", 0)


def test_distinct_n_by_hand():
    texts = ["the cat sat", "the cat ran"]
    # unigrams: the cat sat the cat ran -> 4 distinct of 6
    assert distinct_n(texts, 1) == pytest.approx(4 / 6)
    # bigrams: (the cat) (cat sat) (the cat) (cat ran) -> 3 distinct of 4
    assert distinct_n(texts, 2) == pytest.approx(3 / 4)
    assert distinct_n(["x"], 2) == 0.0
    assert distinct_n(["a b c d"], 1) == 1.0


def test_repetition_rate_by_hand():
    # "a a a a": bigrams (a a) x3 -> 1 - 1/3; "a b c": bigrams all distinct -> 0; "z" has no bigram (skipped)
    assert repetition_rate(["a a a a", "a b c", "z"], n=2) == pytest.approx((2 / 3 + 0.0) / 2)
    assert repetition_rate(["to be or not to be"], n=1) == pytest.approx(1 - 4 / 6)
    assert repetition_rate([], n=2) == 0.0


def test_ngram_entropy_by_hand():
    assert ngram_entropy(["a b c d"], 1) == pytest.approx(2.0)  # 4 equally likely words: log2 4
    assert ngram_entropy(["a a a a"], 1) == 0.0
    # unigrams a:2, b:1, c:1 -> -(1/2 log2 1/2 + 2 * 1/4 log2 1/4) = 1.5 bits
    assert ngram_entropy(["a b", "a c"], 1) == pytest.approx(1.5)
    assert ngram_entropy([""], 1) == 0.0


# ------------------------------------------------------------------------------------ scripted worker group
class ScriptedActorGroup:
    """Generates fixed responses chosen by the prompt's last token; log-probs depend on that token too."""

    world_size = 2  # batches of odd size exercise the pad / unpad path

    def __init__(self, tokenizer, responses: dict[int, list[str]]) -> None:
        self.tok = tokenizer
        self.responses = responses
        self.gen_meta: list[dict] = []
        self.log_prob_calls = 0

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        self.gen_meta.append(dict(prompts.meta_info))
        ids = prompts.batch["input_ids"]
        seen: dict[int, int] = {}
        rows, masks = [], []
        for last in ids[:, -1].tolist():
            k = seen.get(last, 0)
            seen[last] = k + 1
            options = self.responses[last]
            tokens = list(options[k % len(options)].encode()) + [self.tok.eos_token_id]
            tokens = tokens[:RESPONSE_LEN]
            rows.append(tokens + [self.tok.pad_token_id] * (RESPONSE_LEN - len(tokens)))
            masks.append([1] * len(tokens) + [0] * (RESPONSE_LEN - len(tokens)))
        responses, response_mask = torch.tensor(rows), torch.tensor(masks)
        attention = torch.cat([prompts.batch["attention_mask"], response_mask], dim=1)
        return DataProto.from_dict(
            tensors={
                "prompts": ids,
                "responses": responses,
                "response_mask": response_mask,
                "input_ids": torch.cat([ids, responses], dim=1),
                "attention_mask": attention,
                "position_ids": torch.clamp(attention.cumsum(-1) - 1, min=0),
            }
        )

    def _last(self, data: DataProto) -> torch.Tensor:
        return data.batch["prompts"][:, -1].float()

    def compute_log_prob(self, data: DataProto) -> DataProto:
        self.log_prob_calls += 1
        lp = (-0.1 * (self._last(data) - 64)).unsqueeze(1).expand(-1, RESPONSE_LEN).clone()
        return DataProto.from_dict(tensors={"old_log_probs": lp, "entropys": torch.zeros_like(lp)})

    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"ref_log_prob": torch.full((len(data), RESPONSE_LEN), -0.5)})


def _prompts(tokenizer, markers: list[int], truths: list[str], source: str = "arithmetic") -> DataProto:
    ids = torch.tensor([[tokenizer.pad_token_id, 65, m] for m in markers])
    mask = torch.tensor([[0, 1, 1]] * len(markers))
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": torch.clamp(mask.cumsum(-1) - 1, min=0)},
        non_tensors={
            "data_source": np.array([source] * len(markers), dtype=object),
            "reward_model": np.array([{"ground_truth": t} for t in truths], dtype=object),
        },
    )


def _trainer(tokenizer, wg, step: int = 2, **kw):
    return SimpleNamespace(tokenizer=tokenizer, actor_rollout_wg=wg, global_steps=step, val_dataloader=None, **kw)


RESPONSES = {65: ["7", "the the the"], 66: ["x 12", "y"], 67: ["so 9", "9"]}


def test_accuracy_evaluator_counts_correct_greedy_answers(byte_tokenizer):
    wg = ScriptedActorGroup(byte_tokenizer, RESPONSES)
    prompts = _prompts(byte_tokenizer, [65, 66, 67], ["7", "13", "9"])  # answers: 7 ok, 12 wrong, 9 ok
    before = {k: v.clone() for k, v in prompts.batch.items()}
    metrics = AccuracyEvaluator(dataloader=[prompts]).evaluate(_trainer(byte_tokenizer, wg))
    assert metrics == {"eval/acc": pytest.approx(2 / 3), "eval/acc/arithmetic": pytest.approx(2 / 3)}
    assert wg.gen_meta[0]["do_sample"] is False and wg.gen_meta[0]["validate"] is True
    assert wg.gen_meta[0]["eos_token_id"] == byte_tokenizer.eos_token_id
    # the caller's prompt batch is untouched
    assert set(prompts.batch.keys()) == set(before) and all(torch.equal(prompts.batch[k], before[k]) for k in before)


def test_evaluation_generates_where_the_trainer_does(byte_tokenizer):
    """A PPO trainer's ``generate_on_engines`` (its agent loops, or an asynchronous trainer's rollouter) is the path
    evaluation takes, not the actor group directly (an asynchronous trainer's ranks hold no engine)."""
    engines = ScriptedActorGroup(byte_tokenizer, RESPONSES)
    trainer = _trainer(byte_tokenizer, None, generate_on_engines=engines.generate_sequences)
    prompts = _prompts(byte_tokenizer, [65, 66, 67], ["7", "13", "9"])
    assert AccuracyEvaluator(dataloader=[prompts]).evaluate(trainer)["eval/acc"] == pytest.approx(2 / 3)
    assert len(engines.gen_meta) == 1 and engines.gen_meta[0]["validate"] is True


def test_reward_evaluator_uses_the_reward_manager(byte_tokenizer):
    from verl.rewards import default_compute_score
    from verl.workers.reward_manager.naive import NaiveRewardManager

    wg = ScriptedActorGroup(byte_tokenizer, RESPONSES)
    batches = [_prompts(byte_tokenizer, [65, 66], ["7", "12"]), _prompts(byte_tokenizer, [67], ["8"], "other")]

    def score_as_arithmetic(data_source, solution_str, ground_truth, extra_info=None):
        # the "other" source is graded by the arithmetic rule too (default_compute_score would reject the name)
        return default_compute_score("arithmetic", solution_str, ground_truth, extra_info)

    rm = NaiveRewardManager(byte_tokenizer, 0, compute_score=score_as_arithmetic)
    metrics = RewardEvaluator(dataloader=batches).evaluate(_trainer(byte_tokenizer, wg, val_reward_fn=rm))
    # scores: 7 == 7 -> 1, 12 == 12 -> 1, 9 != 8 -> 0
    assert metrics == {
        "eval/reward/mean": pytest.approx(2 / 3),
        "eval/reward/arithmetic/mean": 1.0,
        "eval/reward/other/mean": 0.0,
    }


def test_kl_evaluator_averages_the_per_token_log_ratio(byte_tokenizer):
    wg = ScriptedActorGroup(byte_tokenizer, RESPONSES)
    evaluator = KLEvaluator(dataloader=[_prompts(byte_tokenizer, [65, 66, 67], ["", "", ""])])
    metrics = evaluator.evaluate(_trainer(byte_tokenizer, wg, use_reference_policy=True))
    # log pi = -0.1 * (marker - 64) = -0.1, -0.2, -0.3 ; log pi_ref = -0.5 -> per-token KL 0.4, 0.3, 0.2
    assert metrics == {"eval/kl_ref": pytest.approx(0.3)}
    assert wg.log_prob_calls == 1
    k3 = KLEvaluator(kl_type="low_var_kl", dataloader=[_prompts(byte_tokenizer, [65], [""])])
    value = k3.evaluate(_trainer(byte_tokenizer, wg, use_reference_policy=True))["eval/kl_ref"]
    d = -0.5 - (-0.1)  # log pi_ref - log pi
    assert value == pytest.approx(math.exp(d) - d - 1)
    with pytest.raises(ValueError, match="use_kl_loss"):
        KLEvaluator(dataloader=[]).evaluate(_trainer(byte_tokenizer, wg, use_reference_policy=False))


def test_kl_evaluator_keeps_its_prompt_set_fixed(byte_tokenizer):
    wg = ScriptedActorGroup(byte_tokenizer, RESPONSES)
    loader = iter([_prompts(byte_tokenizer, [65], [""]), _prompts(byte_tokenizer, [67], [""])])
    evaluator = KLEvaluator(dataloader=loader)  # max_batches defaults to 1
    trainer = _trainer(byte_tokenizer, wg, use_reference_policy=True)
    first = evaluator.evaluate(trainer)
    second = evaluator.evaluate(trainer)
    assert first == second == {"eval/kl_ref": pytest.approx(0.4)}


def test_diversity_evaluator_samples_n_responses(byte_tokenizer):
    wg = ScriptedActorGroup(byte_tokenizer, {65: ["a b", "a a a"], 66: ["c"]})
    evaluator = DiversityEvaluator(n=2, dataloader=[_prompts(byte_tokenizer, [65, 66], ["", ""])])
    metrics = evaluator.evaluate(_trainer(byte_tokenizer, wg))
    # responses: "a b", "a a a", "c", "c"
    assert wg.gen_meta[0]["do_sample"] is True and wg.gen_meta[0]["validate"] is False
    p = "eval/diversity"
    assert metrics[f"{p}/distinct_1"] == pytest.approx(3 / 7)  # a b a a a c c
    assert metrics[f"{p}/distinct_2"] == pytest.approx(2 / 3)  # (a b) (a a) (a a)
    assert metrics[f"{p}/repetition_rate"] == pytest.approx((0 + 1 / 2) / 2)
    assert metrics[f"{p}/ngram_entropy"] == pytest.approx(-(1 / 3) * math.log2(1 / 3) - (2 / 3) * math.log2(2 / 3))


def test_every_n_steps_and_missing_prompts(byte_tokenizer):
    wg = ScriptedActorGroup(byte_tokenizer, RESPONSES)
    evaluator = AccuracyEvaluator(every_n_steps=5, dataloader=[_prompts(byte_tokenizer, [65], ["7"])])
    assert evaluator.evaluate(_trainer(byte_tokenizer, wg, step=3)) == {}
    assert evaluator.evaluate(_trainer(byte_tokenizer, wg, step=5)) == {"eval/acc": 1.0, "eval/acc/arithmetic": 1.0}
    with pytest.raises(ValueError, match="no prompts to evaluate"):
        AccuracyEvaluator().evaluate(_trainer(byte_tokenizer, wg))
    with pytest.raises(ValueError, match="every_n_steps"):
        Evaluator(every_n_steps=0)


def test_subclassing_the_base_evaluator(byte_tokenizer):
    class StepEcho(Evaluator):
        def evaluate(self, trainer):
            return {"eval/step": float(trainer.global_steps)}

    assert StepEcho().evaluate(_trainer(byte_tokenizer, None, step=4)) == {"eval/step": 4.0}
    with pytest.raises(NotImplementedError, match="must override"):
        Evaluator().evaluate(None)
