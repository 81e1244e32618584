"""The lean decode loop must reproduce the model: greedy tokens equal transformers ``generate``'s, log-probs equal
a full forward pass's, sampling draws the same tokens as the cache-free reference loop under the same seed."""

from __future__ import annotations

import pytest
import torch

from verl.workers.rollout.base import SamplingSettings
from verl.workers.rollout.fast_decode import FastDecoder, supports_fast_decode
from verl.workers.rollout.hf_rollout import HFRollout


def _left_padded_prompts(vocab: int, bs: int = 4, length: int = 7) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, vocab - 3, (bs, length), generator=gen)
    mask = torch.ones_like(ids)
    for row, pad in enumerate([0, 2, 3, 5][:bs]):
        ids[row, :pad] = 256  # pad id of the byte tokenizer
        mask[row, :pad] = 0
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, pos


def _settings(**kw) -> SamplingSettings:
    base = dict(
        do_sample=False, temperature=1.0, top_p=1.0, top_k=-1, response_length=9, min_new_tokens=9,
        calculate_log_probs=True,
    )  # fmt: skip
    base.update(kw)
    return SamplingSettings(**base)


@pytest.fixture(params=["llama", "qwen2"])
def model(request, tiny_model_dir, tiny_qwen2_dir):
    from transformers import AutoModelForCausalLM

    path = tiny_model_dir if request.param == "llama" else tiny_qwen2_dir
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def test_supported_architectures(model) -> None:
    assert supports_fast_decode(model)
    assert not supports_fast_decode(torch.nn.Linear(2, 2))


def test_greedy_matches_generate_and_log_probs_match_forward(model) -> None:
    from transformers import GenerationConfig

    ids, mask, pos = _left_padded_prompts(model.config.vocab_size)
    settings = _settings()
    tokens, log_probs = FastDecoder(model).generate(ids, mask, pos, settings, eos_ids=[258], pad_id=256)
    assert tokens.shape == (4, 9) and log_probs.shape == (4, 9)

    cfg = GenerationConfig(max_new_tokens=9, min_new_tokens=9, do_sample=False, eos_token_id=258, pad_token_id=256)
    with torch.no_grad():
        expected = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)[:, ids.shape[1] :]
    assert torch.equal(tokens, expected)

    # log p(token) from one full forward over prompt + response, left padding masked
    full = torch.cat([ids, tokens], dim=1)
    full_mask = torch.cat([mask, torch.ones_like(tokens)], dim=1)
    full_pos = (full_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=full, attention_mask=full_mask, position_ids=full_pos).logits
    ref = torch.log_softmax(logits[:, ids.shape[1] - 1 : -1].float(), -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(log_probs, ref, atol=1e-4, rtol=1e-4)


def test_sampling_matches_reference_loop_under_same_seed(model) -> None:
    ids, mask, pos = _left_padded_prompts(model.config.vocab_size)
    settings = _settings(do_sample=True, temperature=0.8, top_k=50, top_p=0.9, min_new_tokens=3)
    torch.manual_seed(123)
    fast, fast_lp = FastDecoder(model).generate(ids, mask, pos, settings, eos_ids=[258], pad_id=256)
    rollout = HFRollout(model, {"response_length": 9})
    torch.manual_seed(123)
    slow, slow_lp = rollout._decode_loop(ids, mask, pos, settings, eos_ids=[258], pad_id=256)
    assert torch.equal(fast, slow)
    torch.testing.assert_close(fast_lp, slow_lp, atol=1e-4, rtol=1e-4)


def test_eos_stops_rows_and_pads_after() -> None:
    """With logits that always favour EOS (id 258), EOS is blocked for min_new_tokens steps (argmax of the zero
    logits is token 0), emitted at step min_new_tokens, and the loop stops there for every row."""
    from verl.utils.models.tiny import make_tiny_causal_lm

    model = make_tiny_causal_lm().eval()

    def eos_logits(module, inputs, output):
        fixed = torch.zeros_like(output)
        fixed[..., 258] = 10.0
        return fixed

    model.lm_head.register_forward_hook(eos_logits)
    ids, mask, pos = _left_padded_prompts(model.config.vocab_size)
    tokens, log_probs = FastDecoder(model).generate(
        ids, mask, pos, _settings(min_new_tokens=2), eos_ids=[258], pad_id=256
    )
    assert tokens.tolist() == [[0, 0, 258]] * 4
    # log-probs use the unmasked logits: log softmax of (0, ..., 10 at EOS) over 259 tokens
    lse = torch.logsumexp(torch.tensor([10.0] + [0.0] * 258), 0)
    torch.testing.assert_close(log_probs[:, 0], torch.full((4,), -float(lse)))
    torch.testing.assert_close(log_probs[:, 2], torch.full((4,), 10.0 - float(lse)))
