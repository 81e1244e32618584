"""The one decode loop must reproduce the model through each of its forwards: greedy tokens equal transformers
``generate``'s, log-probs equal a full forward pass's, and the static-cache forward, the model's own KV-cache forward
and the cache-free full forward draw the same tokens under the same seed."""

from __future__ import annotations

import pytest
import torch

from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm, randomize_norm_weights
from verl.workers.rollout.base import SamplingSettings
from verl.workers.rollout.decode import (
    DecodeLoop,
    FullForward,
    ModelCacheForward,
    StaticCacheForward,
    supports_static_cache,
)


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


@pytest.fixture(params=["llama", "qwen2", "qwen3", "mistral"])
def model(request, tiny_model_dir, tiny_qwen2_dir):
    from transformers import AutoModelForCausalLM

    if request.param in ("qwen3", "mistral"):  # Qwen3's per-head q/k norms get drawn weights: q's and k's differ
        built = make_tiny_causal_lm(TinyModelSpec(arch=request.param), seed=0).eval()
        randomize_norm_weights(built)
        return built
    path = tiny_model_dir if request.param == "llama" else tiny_qwen2_dir
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def test_supported_architectures(model) -> None:
    assert supports_static_cache(model)
    assert not supports_static_cache(torch.nn.Linear(2, 2))
    if model.config.model_type == "mistral":  # with a sliding window: the model's own forward masks it
        from transformers import MistralConfig, MistralForCausalLM

        windowed = MistralConfig(**{**model.config.to_dict(), "sliding_window": 64})
        assert not supports_static_cache(MistralForCausalLM(windowed))


class LogitsOnly(torch.nn.Module):
    """A module without ``generate`` or a cache (decoded by the full forward)."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits


def _loops(model) -> dict[str, DecodeLoop]:
    loops = {
        "static": DecodeLoop(model),
        "model_cache": DecodeLoop(model, static_cache=False),
        "full": DecodeLoop(LogitsOnly(model)),
    }
    kinds = {name: type(loop.forward) for name, loop in loops.items()}
    assert kinds == {"static": StaticCacheForward, "model_cache": ModelCacheForward, "full": FullForward}
    return loops


@pytest.mark.parametrize("forward", ["static", "model_cache", "full"])
def test_greedy_matches_generate_and_log_probs_match_forward(model, forward) -> None:
    from transformers import GenerationConfig

    ids, mask, pos = _left_padded_prompts(model.config.vocab_size)
    settings = _settings()
    tokens, log_probs = _loops(model)[forward].generate(ids, mask, pos, settings, eos_ids=[258], pad_id=256)
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


def test_every_forward_samples_the_same_tokens_under_same_seed(model) -> None:
    ids, mask, pos = _left_padded_prompts(model.config.vocab_size)
    settings = _settings(do_sample=True, temperature=0.8, top_k=50, top_p=0.9, min_new_tokens=3)
    out = {}
    for name, loop in _loops(model).items():
        torch.manual_seed(123)
        out[name] = loop.generate(ids, mask, pos, settings, eos_ids=[258], pad_id=256)
    for name in ("model_cache", "full"):
        assert torch.equal(out["static"][0], out[name][0]), name
        torch.testing.assert_close(out["static"][1], out[name][1], atol=1e-4, rtol=1e-4)


def test_prefill_runs_in_row_chunks_of_its_token_budget_with_the_same_results(model, monkeypatch) -> None:
    """A batch of more prompt tokens than ``prefill_tokens`` is prefilled in row chunks (here 2 rows of 7 tokens
    each: rows 0-1, 2-3), each written into its own cache rows: the same tokens and log-probs as one prefill."""
    ids, mask, pos = _left_padded_prompts(model.config.vocab_size)
    settings = _settings(do_sample=True, min_new_tokens=3)
    whole = DecodeLoop(model)
    torch.manual_seed(5)
    expected = whole.generate(ids, mask, pos, settings, eos_ids=[258], pad_id=256)
    chunked = DecodeLoop(model)
    chunked.forward.prefill_tokens = 15  # 15 // 7 = 2 rows a chunk
    calls: list[tuple[int, int]] = []
    original = StaticCacheForward._prefill_rows

    def spy(self, cache, first, input_ids, *args):
        calls.append((first, input_ids.shape[0]))
        return original(self, cache, first, input_ids, *args)

    monkeypatch.setattr(StaticCacheForward, "_prefill_rows", spy)
    torch.manual_seed(5)
    out = chunked.generate(ids, mask, pos, settings, eos_ids=[258], pad_id=256)
    assert calls == [(0, 2), (2, 2)]
    assert torch.equal(out[0], expected[0])
    torch.testing.assert_close(out[1], expected[1], atol=1e-5, rtol=1e-5)


def test_an_architecture_without_static_cache_decodes_with_its_own_cache() -> None:
    """GPT-2 (learned positions, no rotary): the model's own forward and KV cache; greedy tokens equal generate's,
    and compaction of finished rows (many end ids) keeps every row equal to the cache-free loop."""
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=259, n_positions=64, n_embd=32, n_layer=2, n_head=2)).eval()
    loop = DecodeLoop(model, mode="cuda_graph")  # not graphable: runs eager whatever is asked
    assert isinstance(loop.forward, ModelCacheForward) and loop.mode == "eager"
    ids, mask, pos = _left_padded_prompts(259)
    tokens, _ = loop.generate(ids, mask, pos, _settings(), eos_ids=[258], pad_id=256)
    cfg = GenerationConfig(max_new_tokens=9, min_new_tokens=9, do_sample=False, eos_token_id=258, pad_token_id=256)
    with torch.no_grad():
        expected = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)[:, ids.shape[1] :]
    assert torch.equal(tokens, expected)

    settings = _settings(do_sample=True, temperature=1.5, min_new_tokens=0)
    ends = list(range(0, 120))  # rows end at different steps: the batch is compacted mid-way
    torch.manual_seed(5)
    cached, cached_lp = loop.generate(ids, mask, pos, settings, eos_ids=ends, pad_id=256)
    torch.manual_seed(5)
    full, full_lp = DecodeLoop(LogitsOnly(model)).generate(ids, mask, pos, settings, eos_ids=ends, pad_id=256)
    assert torch.equal(cached, full)
    assert 1 < cached.shape[1] < 9 and (cached == 256).any(), "no row ended early: compaction is not exercised"


def test_eos_stops_rows_and_pads_after() -> None:
    """With logits that always favour EOS (id 258), EOS is blocked for min_new_tokens steps (argmax of the zero
    logits is token 0), emitted at step min_new_tokens, and the loop stops there for every row."""
    from verl.models.tiny import make_tiny_causal_lm

    model = make_tiny_causal_lm().eval()

    def eos_logits(module, inputs, output):
        fixed = torch.zeros_like(output)
        fixed[..., 258] = 10.0
        return fixed

    model.lm_head.register_forward_hook(eos_logits)
    ids, mask, pos = _left_padded_prompts(model.config.vocab_size)
    tokens, log_probs = DecodeLoop(model).generate(
        ids, mask, pos, _settings(min_new_tokens=2), eos_ids=[258], pad_id=256
    )
    assert tokens.tolist() == [[0, 0, 258]] * 4
    # log-probs use the unmasked logits: log softmax of (0, ..., 10 at EOS) over 259 tokens
    lse = torch.logsumexp(torch.tensor([10.0] + [0.0] * 258), 0)
    torch.testing.assert_close(log_probs[:, 0], torch.full((4,), -float(lse)))
    torch.testing.assert_close(log_probs[:, 2], torch.full((4,), 10.0 - float(lse)))


@pytest.mark.parametrize("static_cache", [True, False])
def test_banned_tokens_are_never_sampled_but_keep_their_log_probs(static_cache) -> None:
    """Logits that favour token 7 then token 9: with 7 banned, greedy picks 9 at every step, and the log-prob is
    read from the unfiltered logits (as the actor recomputes it)."""
    from verl.models.tiny import make_tiny_causal_lm

    model = make_tiny_causal_lm().eval()

    def fixed_logits(module, inputs, output):
        fixed = torch.zeros_like(output)
        fixed[..., 7], fixed[..., 9] = 10.0, 5.0
        return fixed

    model.lm_head.register_forward_hook(fixed_logits)
    ids, mask, pos = _left_padded_prompts(model.config.vocab_size)
    loop = DecodeLoop(model, static_cache=static_cache)
    free, _ = loop.generate(ids, mask, pos, _settings(min_new_tokens=0), eos_ids=[258], pad_id=256)
    assert bool((free == 7).all())
    tokens, log_probs = loop.generate(
        ids, mask, pos, _settings(min_new_tokens=0), eos_ids=[258], pad_id=256, banned_ids=[7]
    )
    assert bool((tokens == 9).all())
    lse = torch.logsumexp(torch.tensor([10.0, 5.0] + [0.0] * 257), 0)
    torch.testing.assert_close(log_probs, torch.full_like(log_probs, 5.0 - float(lse)))
