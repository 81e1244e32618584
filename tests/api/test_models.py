"""ActorModel / Actor / CriticModel / RewardModel: alignment, shapes, saving, and a non-transformers actor training."""

from __future__ import annotations

import math

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForSequenceClassification

from verl.api.models import Actor, ActorModel, CriticModel, RewardModel, load_generic_weights
from verl.models.tiny import make_byte_tokenizer, make_tiny_causal_lm


class CharLM(ActorModel):
    """A non-transformers policy: token embedding -> linear over the vocabulary (a bigram model)."""

    def __init__(self, vocab: int = 259, dim: int = 16) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.out = torch.nn.Linear(dim, vocab)

    def forward(self, input_ids, attention_mask=None):
        return self.out(self.emb(input_ids))

    def generate(self, input_ids, max_new_tokens: int = 4, **kwargs):
        ids = input_ids
        for _ in range(max_new_tokens):
            ids = torch.cat([ids, self.forward(ids)[:, -1:].argmax(-1)], dim=-1)
        return ids


def test_actor_aligns_pad_and_eos():
    tok = make_byte_tokenizer(with_pad=False)
    model = make_tiny_causal_lm(tokenizer=make_byte_tokenizer())
    model.config.pad_token_id = 7
    model.config.eos_token_id = 8
    model.generation_config.pad_token_id = 7
    model.generation_config.eos_token_id = 8
    tok.padding_side = "right"
    actor = Actor(model=model, tokenizer=tok)
    eos = 256 + 2  # <pad>, <bos>, <eos> follow the 256 bytes
    assert tok.pad_token == "<eos>" and tok.pad_token_id == eos
    assert tok.padding_side == "left"
    assert model.config.pad_token_id == eos and model.config.eos_token_id == eos
    assert model.generation_config.pad_token_id == eos and model.generation_config.eos_token_id == eos
    assert actor.hf_model is model and actor.generation_config is model.generation_config


def test_actor_forward_and_generate_delegate(byte_tokenizer):
    model = make_tiny_causal_lm(tokenizer=byte_tokenizer)
    actor = ActorModel(model, tokenizer=byte_tokenizer)
    ids = torch.tensor([[97, 98, 99]])
    assert torch.equal(actor(ids).logits, model(ids).logits)
    out = actor.generate(ids, max_new_tokens=3, do_sample=False)
    assert out.shape[0] == 1 and out.shape[1] <= 6 and out[0, :3].tolist() == [97, 98, 99]


def test_critic_value_head_shape_and_values(byte_tokenizer):
    torch.manual_seed(0)
    lm = make_tiny_causal_lm(tokenizer=byte_tokenizer)
    critic = CriticModel(lm)
    ids = torch.tensor([[97, 98, 99, 100], [101, 102, 103, 104]])
    mask = torch.ones_like(ids)
    values = critic(ids, attention_mask=mask)
    assert values.shape == (2, 4)
    assert torch.count_nonzero(values) == 0  # the head starts at zero
    with torch.no_grad():
        critic.value_head.weight.normal_()
        critic.value_head.bias.fill_(0.5)
    values = critic(ids, attention_mask=mask)
    hidden = lm(ids, attention_mask=mask, output_hidden_states=True).hidden_states[-1]
    expected = hidden @ critic.value_head.weight[0] + 0.5
    torch.testing.assert_close(values, expected, rtol=1e-5, atol=1e-5)


def test_actor_save_pretrained_roundtrip(tmp_path, byte_tokenizer):
    model = make_tiny_causal_lm(tokenizer=byte_tokenizer)
    actor = Actor(model, byte_tokenizer)
    actor.save_pretrained(str(tmp_path / "hf"))
    reloaded = AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf"))
    for (name, a), (_, b) in zip(model.state_dict().items(), reloaded.state_dict().items()):
        assert torch.equal(a, b), name
    assert (tmp_path / "hf" / "tokenizer.json").exists()
    # a non-transformers actor: safetensors of its state dict
    char = CharLM()
    char.save_pretrained(str(tmp_path / "char"))
    other = CharLM()
    load_generic_weights(other, str(tmp_path / "char"))
    assert torch.equal(other.out.weight, char.out.weight)


def test_reward_model_function_and_classifier(byte_tokenizer):
    fn_reward = RewardModel(lambda prompts, responses: [float(r.count("a")) for r in responses])
    fn_reward.policy_tokenizer = byte_tokenizer
    scores = fn_reward(torch.tensor([[97, 97, 98], [98, 98, 98]]))
    assert scores.tolist() == [2.0, 0.0]

    cfg = LlamaConfig(
        vocab_size=259,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        num_labels=1,
        pad_token_id=byte_tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    clf = LlamaForSequenceClassification(cfg).eval()
    rm = RewardModel(clf, tokenizer=byte_tokenizer)
    got = rm.score_texts(["a", "bc"], ["b", "d"])
    for text, value in zip(["ab", "bcd"], got):
        ids = torch.tensor([byte_tokenizer.encode(text, add_special_tokens=False)])
        with torch.no_grad():
            want = clf(input_ids=ids).logits[0, 0].item()
        assert math.isclose(value, want, rel_tol=1e-4, abs_tol=1e-5)


def ascii_fraction_reward(data, return_dict: bool = False):
    """A reward manager (verl's contract): fraction of ASCII tokens in the response, at its last token."""
    responses, mask = data.batch["responses"], data.batch["response_mask"]
    score = ((responses < 128) * mask).sum(-1).float() / mask.sum(-1).clamp(min=1)
    tensor = torch.zeros_like(responses, dtype=torch.float32)
    tensor[torch.arange(len(score)), mask.sum(-1) - 1] = score
    return {"reward_tensor": tensor, "reward_extra_info": {}} if return_dict else tensor


def test_non_transformers_actor_subclass_trains(byte_tokenizer):
    from verl import PPOTrainer

    torch.manual_seed(0)
    actor = CharLM()
    before = {k: v.detach().cpu().clone() for k, v in actor.state_dict().items()}
    trainer = PPOTrainer(
        actor_model=actor,
        tokenizer=byte_tokenizer,
        reward_fn=ascii_fraction_reward,
        config={
            "algorithm": "grpo",
            "batch_size": 2,
            "lr": 1e-2,
            "max_new_tokens": 6,
            "num_samples": 4,
            "actor_rollout_ref.actor.dtype": "float32",
            "actor_rollout_ref.rollout.dtype": "float32",
            "trainer.default_local_dir": "/tmp/verl_api_test_char",
        },
    )
    out = trainer.step(["ab", "ba"])
    assert math.isfinite(out["loss"])
    assert out["critic/score/max"] > out["critic/score/min"], out  # varied rewards -> non-zero advantages
    assert trainer.actor_model is actor
    changed = [k for k, v in actor.state_dict().items() if not torch.equal(v.cpu(), before[k])]
    assert changed, "the user's own module must be updated in place"
    trainer.close()
