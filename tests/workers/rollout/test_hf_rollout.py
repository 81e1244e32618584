"""HFRollout: output layout, EOS handling, sampling settings, hybrid-engine weight sharing, log-probs."""

from __future__ import annotations

import pytest
import torch

from verl.models.tiny import make_tiny_causal_lm
from verl.workers.rollout.base import resolve_sampling
from verl.workers.rollout.hf_rollout import HFRollout, filter_top_k_top_p

PAD, EOS = 256, 258
VOCAB = 259


@pytest.fixture
def model() -> torch.nn.Module:
    return make_tiny_causal_lm(seed=0)


class LogitsOnly(torch.nn.Module):
    """A plain module (no ``generate``) wrapping a transformers model: exercises the no-KV-cache decode loop."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits


class Scripted(torch.nn.Module):
    """Logits we control: the argmax is always ``favourite`` (a tensor output, ``forward(input_ids)`` only)."""

    def __init__(self, favourite: int) -> None:
        super().__init__()
        self.favourite = favourite
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids):
        logits = torch.zeros(*input_ids.shape, VOCAB)
        logits[..., self.favourite] = 10.0
        logits[..., 65] = 5.0  # runner-up "A"
        return logits + self.dummy


def test_output_layout(model, rollout_config, make_prompts, byte_prompts):
    prompts = make_prompts(byte_prompts, prompt_len=8, do_sample=False, global_steps=3)
    out = HFRollout(model, rollout_config(response_length=6)).generate_sequences(prompts)
    b = out.batch
    assert b["prompts"].shape == (5, 8) and b["responses"].shape == (5, 6)
    for key in ("input_ids", "attention_mask", "position_ids"):
        assert b[key].shape == (5, 14), key
    assert b["response_mask"].shape == (5, 6)
    assert "rollout_log_probs" not in b.keys()
    assert torch.equal(b["prompts"], prompts.batch["input_ids"])
    assert torch.equal(b["input_ids"], torch.cat([prompts.batch["input_ids"], b["responses"]], dim=1))
    assert torch.equal(b["attention_mask"][:, :8], prompts.batch["attention_mask"])
    assert torch.equal(b["attention_mask"][:, 8:], b["response_mask"])
    # prompts keep their left padding
    assert b["prompts"][2].tolist() == [PAD] * 7 + [ord("a")]
    # positions continue after the last prompt position: row "a" has its only token at 0 -> responses at 1..6
    assert b["position_ids"][2, 8:].tolist() == [1, 2, 3, 4, 5, 6]
    assert b["position_ids"][3, 8:].tolist() == [6, 7, 8, 9, 10, 11]  # "12*7=?" has 6 tokens: 0..5
    assert list(out.non_tensor_batch["uid"]) == [f"uid-{i}" for i in range(5)]
    assert out.meta_info["global_steps"] == 3 and out.meta_info["eos_token_id"] == EOS


def _first_index(row: list[int], token: int) -> int | None:
    return row.index(token) if token in row else None


@pytest.mark.parametrize("pad_is_eos", [False, True])
def test_response_mask_up_to_and_including_first_eos(model, rollout_config, make_prompts, byte_prompts, pad_is_eos):
    cfg = rollout_config(response_length=6, do_sample=False)
    free = HFRollout(model, cfg).generate_sequences(make_prompts(byte_prompts, prompt_len=8))
    free_rows = free.batch["responses"].tolist()
    # Declare the third token greedy decoding produced for row 0 to be the EOS: greedy decoding is deterministic,
    # so each row now stops at its first occurrence of that token.
    eos = free_rows[0][2]
    pad = eos if pad_is_eos else PAD
    prompts = make_prompts(byte_prompts, prompt_len=8, eos_token_id=[eos], pad_token_id=pad)
    out = HFRollout(model, cfg).generate_sequences(prompts)
    for i, row in enumerate(free_rows):
        stop = _first_index(row, eos)
        n_valid = 6 if stop is None else stop + 1
        expected = row[:n_valid] + [pad] * (6 - n_valid)
        assert out.batch["responses"][i].tolist() == expected, i
        assert out.batch["response_mask"][i].tolist() == [1] * n_valid + [0] * (6 - n_valid), i
    assert out.batch["response_mask"][0].tolist()[:3] == [1, 1, 1]


def test_ignore_eos_decodes_to_the_full_length_past_eos(model, rollout_config, make_prompts, byte_prompts):
    """rollout.ignore_eos=true (upstream v0.9): the same greedy tokens as with no EOS at all, all response_length of
    them kept and masked in, although the declared EOS occurs in them; without it the rows stop there."""
    cfg = rollout_config(response_length=6, do_sample=False)
    free = HFRollout(model, cfg).generate_sequences(make_prompts(byte_prompts, prompt_len=8)).batch["responses"]
    eos = int(free[0, 2])
    prompts = make_prompts(byte_prompts, prompt_len=8, eos_token_id=[eos], pad_token_id=PAD)
    out = HFRollout(model, rollout_config(response_length=6, do_sample=False, ignore_eos=True)).generate_sequences(
        prompts
    )
    assert torch.equal(out.batch["responses"], free)
    assert out.batch["response_mask"].tolist() == [[1] * 6] * len(byte_prompts)
    stopped = HFRollout(model, cfg).generate_sequences(prompts).batch["response_mask"]
    assert stopped[0].tolist() == [1, 1, 1, 0, 0, 0], "the same EOS ends row 0 when ignore_eos is off"
    assert resolve_sampling(rollout_config(ignore_eos=True), {}).ignore_eos
    assert not resolve_sampling(rollout_config(), {}).ignore_eos


def test_greedy_is_deterministic_and_matches_the_plain_decode_loop(model, rollout_config, make_prompts, byte_prompts):
    cfg = rollout_config(response_length=5, do_sample=True, temperature=1.0)
    prompts = make_prompts(byte_prompts, prompt_len=8, validate=True)  # validate -> val_kwargs: greedy
    first = HFRollout(model, cfg).generate_sequences(prompts).batch["responses"]
    second = HFRollout(model, cfg).generate_sequences(prompts).batch["responses"]
    assert torch.equal(first, second)
    # the same weights through a module without `generate` (full forward per token, no KV cache)
    loop = HFRollout(LogitsOnly(model), cfg).generate_sequences(prompts).batch["responses"]
    assert torch.equal(first, loop)
    # and greedy means: each token is the argmax of a full forward over the sequence so far
    ids = make_prompts(byte_prompts[:1]).batch["input_ids"]
    for t in range(5):
        nxt = model(input_ids=ids).logits[0, -1].argmax()
        assert int(first[0, t]) == int(nxt)
        ids = torch.cat([ids, nxt.view(1, 1)], dim=1)


def test_generation_uses_the_actor_parameters_in_place(model, rollout_config, make_prompts, byte_prompts):
    ptrs = {name: p.data_ptr() for name, p in model.named_parameters()}
    rollout = HFRollout(model, rollout_config(do_sample=False))
    assert rollout.module is model
    rollout.generate_sequences(make_prompts(byte_prompts))
    assert {name: p.data_ptr() for name, p in model.named_parameters()} == ptrs
    # an in-place change to the actor's weights shows up in the very next generation: no second copy exists.
    # With a zero lm_head every logit is 0, and greedy argmax picks the first id (0) at every step.
    with torch.no_grad():
        model.lm_head.weight.zero_()
    out = rollout.generate_sequences(make_prompts(byte_prompts))
    assert out.batch["responses"].eq(0).all()


def test_rollout_log_probs_match_a_manual_forward(model, rollout_config, make_prompts, byte_prompts):
    cfg = rollout_config(response_length=5, temperature=0.7, calculate_log_probs=True, top_k=20, top_p=0.9)
    out = HFRollout(model, cfg).generate_sequences(make_prompts(byte_prompts, prompt_len=8))
    b = out.batch
    logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"]).logits
    # logits at position t predict token t+1: responses start at column 8
    resp_logits = logits[:, 7:-1, :] / 0.7
    expected = torch.log_softmax(resp_logits, dim=-1).gather(-1, b["responses"].unsqueeze(-1)).squeeze(-1)
    mask = b["response_mask"].bool()
    assert torch.allclose(b["rollout_log_probs"][mask], expected[mask], atol=1e-4)
    assert (b["rollout_log_probs"][~mask] == 0).all()


def test_mode_and_gradient_checkpointing_are_restored(model, rollout_config, make_prompts, byte_prompts):
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    HFRollout(model, rollout_config()).generate_sequences(make_prompts(byte_prompts))
    assert model.training and model.is_gradient_checkpointing
    model.eval()
    HFRollout(model, rollout_config()).generate_sequences(make_prompts(byte_prompts))
    assert not model.training


def test_micro_batching_gives_the_same_greedy_output(model, rollout_config, make_prompts, byte_prompts):
    prompts = make_prompts(byte_prompts, prompt_len=8, do_sample=False)
    whole = HFRollout(model, rollout_config(max_num_seqs=256)).generate_sequences(prompts)
    parts = HFRollout(model, rollout_config(max_num_seqs=2)).generate_sequences(prompts)
    assert torch.equal(whole.batch["responses"], parts.batch["responses"])


def test_seeded_sampling_is_reproducible_and_leaves_the_global_rng_alone(model, rollout_config, make_prompts):
    prompts = make_prompts([list(b"abc")] * 4)
    state = torch.get_rng_state()
    a = HFRollout(model, rollout_config(seed=7)).generate_sequences(prompts).batch["responses"]
    b = HFRollout(model, rollout_config(seed=7)).generate_sequences(prompts).batch["responses"]
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(a, b)
    # rows are the same prompt repeated; sampling at temperature 1 on a near-uniform tiny model differs per row
    assert len({tuple(r) for r in a.tolist()}) > 1
    rollout = HFRollout(model, rollout_config(seed=7))
    first, second = (rollout.generate_sequences(prompts).batch["responses"] for _ in range(2))
    assert not torch.equal(first, second)  # successive calls draw fresh samples


def test_min_new_tokens_and_scripted_eos(rollout_config, make_prompts):
    scripted = Scripted(favourite=EOS)
    prompts = make_prompts([list(b"ab"), list(b"c")])
    out = HFRollout(scripted, rollout_config(do_sample=False)).generate_sequences(prompts)
    assert out.batch["responses"].tolist() == [[EOS] + [PAD] * 5] * 2
    assert out.batch["response_mask"].tolist() == [[1, 0, 0, 0, 0, 0]] * 2
    out = HFRollout(scripted, rollout_config(do_sample=False, min_new_tokens=3)).generate_sequences(prompts)
    assert out.batch["responses"].tolist() == [[65, 65, 65, EOS, PAD, PAD]] * 2
    assert out.batch["response_mask"].tolist() == [[1, 1, 1, 1, 0, 0]] * 2


def test_filter_top_k_top_p_by_hand():
    logits = torch.log(torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]]))
    inf = float("-inf")
    kept = filter_top_k_top_p(logits, top_k=2)
    assert torch.isinf(kept).tolist() == [[False, False, True, True, True]]
    # nucleus 0.6: mass above each token = 0, .5, .7, ... -> keep the first two
    kept = filter_top_k_top_p(logits, top_p=0.6)
    assert kept[0, 2:].tolist() == [inf, inf, inf] and torch.isfinite(kept[0, :2]).all()
    assert torch.equal(filter_top_k_top_p(logits, top_k=-1, top_p=1.0), logits)


def test_resolve_sampling_precedence_and_errors(rollout_config):
    cfg = rollout_config(temperature=0.9, top_k=5)
    s = resolve_sampling(cfg, {})
    assert (s.do_sample, s.temperature, s.top_k, s.response_length, s.greedy) == (True, 0.9, 5, 6, False)
    s = resolve_sampling(cfg, {"validate": True})
    assert s.greedy and s.top_k == -1 and s.logprob_temperature == 1.0
    s = resolve_sampling(cfg, {"temperature": 0.5, "response_length": 3})
    assert (s.temperature, s.response_length) == (0.5, 3)
    with pytest.raises(ValueError, match=r"meta_info\['top_p'\]=1.5"):
        resolve_sampling(cfg, {"top_p": 1.5})
    with pytest.raises(ValueError, match=r"rollout.min_new_tokens=9"):
        resolve_sampling(rollout_config(min_new_tokens=9), {})


def test_right_padded_prompts_are_rejected(model, rollout_config, make_prompts):
    prompts = make_prompts([list(b"ab"), list(b"c")])
    prompts.batch["attention_mask"][1] = torch.tensor([1, 0])
    with pytest.raises(ValueError, match="row 1 is not left-padded"):
        HFRollout(model, rollout_config()).generate_sequences(prompts)
