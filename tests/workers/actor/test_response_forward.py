"""The response forward of one micro-batch: padded, packed into one row and packed into rows give the same
log-probs, entropies, ``sum pi^2`` and gradients, through the logits and through the fused LM head."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm
from verl.workers.actor.response_forward import response_logits_forward

PROMPT, RESPONSE = 6, 7
LAYOUTS = {"padded": (False, None), "one_row": (True, False), "rows": (True, True)}


def _micro(seed: int = 0) -> TensorDict:
    """Six rows: left-padded prompts of 1..6 tokens, right-padded responses of 1..7 tokens."""
    gen = torch.Generator().manual_seed(seed)
    prompt_lens, resp_lens = [6, 2, 4, 1, 5, 3], [7, 3, 1, 5, 2, 6]
    bs = len(prompt_lens)
    ids = torch.randint(0, 256, (bs, PROMPT + RESPONSE), generator=gen)
    mask = torch.zeros(bs, PROMPT + RESPONSE, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompt_lens, resp_lens)):
        mask[i, PROMPT - p : PROMPT + r] = 1
    ids = ids * mask
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return TensorDict(
        {"input_ids": ids, "attention_mask": mask, "position_ids": positions, "responses": ids[:, PROMPT:]},
        batch_size=[bs],
    )


def _forward(model, micro: TensorDict, layout: str, fused: bool) -> tuple[torch.Tensor, ...]:
    rmpad, rows = LAYOUTS[layout]
    model.zero_grad()
    log_probs, entropy, sq = response_logits_forward(
        model, micro, 0.7, True, True, rmpad, calculate_sum_pi_squared=True, fused=fused, pack_rows=rows
    )
    valid = micro["attention_mask"][:, PROMPT:].bool()
    (log_probs[valid].sum() + 0.1 * entropy[valid].sum()).backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return log_probs[valid], entropy[valid], sq[valid], grads


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("fused", [False, True])
def test_every_layout_gives_the_padded_values_and_gradients(arch: str, attn: str, fused: bool) -> None:
    model = make_tiny_causal_lm(TinyModelSpec(arch=arch))
    model.config._attn_implementation = attn
    micro = _micro()
    expected = _forward(model, micro, "padded", fused=False)
    for layout in ("one_row", "rows"):
        got = _forward(model, micro, layout, fused)
        for name, a, b in zip(("log_probs", "entropy", "sum_pi_squared", "grads"), got, expected):
            torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4, msg=f"{layout} {name}")


def test_rows_are_chosen_unless_the_attention_is_varlen(monkeypatch) -> None:
    """``pack_rows=None`` packs into rows (4 rows of the longest sequence's 13 tokens, not 6 rows) for sdpa."""
    import verl.workers.actor.token_scoring as rf

    model = make_tiny_causal_lm()
    model.config._attn_implementation = "sdpa"
    seen = []
    real = rf.pack_padded_batch

    def spy(ids, mask, into_rows=False):
        packed = real(ids, mask, into_rows)
        seen.append(tuple(packed.input_ids.shape))
        return packed

    monkeypatch.setattr(rf, "pack_padded_batch", spy)
    with torch.no_grad():
        response_logits_forward(model, _micro(), 1.0, False, False, True)
    assert seen == [(4, 13)]


def test_the_lm_head_runs_on_the_scoring_positions_only() -> None:
    model = make_tiny_causal_lm()
    micro = _micro()
    rows_seen = []  # the head's output: [1, kept positions]
    hook = model.get_output_embeddings().register_forward_hook(lambda m, i, o: rows_seen.append(o.shape[:2]))
    with torch.no_grad():
        response_logits_forward(model, micro, 1.0, False, False, True, pack_rows=True)
    hook.remove()
    scoring = int(micro["attention_mask"][:, PROMPT - 1 : -1].sum())  # tokens whose logits score a response token
    assert rows_seen == [(1, scoring)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("compiled", [False, True])
def test_packed_rows_give_the_padded_values_on_cuda(compiled: bool) -> None:
    """sdpa on CUDA (the GPU default) under bf16 autocast, with the decoder layers compiled as
    ``actor.use_torch_compile`` does: packed rows of two differently shaped micro-batches give the padded log-probs."""
    from verl.utils.fsdp_utils import compile_decoder_layers

    model = make_tiny_causal_lm(TinyModelSpec(arch="qwen3")).cuda()
    model.config._attn_implementation = "sdpa"
    if compiled:
        compile_decoder_layers(model)
    for seed, rows in ((0, 6), (1, 4)):
        micro = _micro(seed)[:rows].to("cuda")
        valid = micro["attention_mask"][:, PROMPT:].bool()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            padded, _ = response_logits_forward(model, micro, 1.0, False, False, False)
            packed, _ = response_logits_forward(model, micro, 1.0, False, False, True)
        assert packed.device.type == "cuda"
        torch.testing.assert_close(packed[valid], padded[valid], atol=0.05, rtol=0.02)
