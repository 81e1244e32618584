"""HFRollout's per-step hook (used by the inference service): it sees every token, and the rows it stops end there.

The decode loop behaves alike with each of its forwards (static cache, the model's own KV cache, full forward).
"""

from __future__ import annotations

import pytest
import torch

from verl.models.tiny import make_tiny_causal_lm
from verl.workers.rollout.hf_rollout import HFRollout

PAD, EOS = 256, 258


class LogitsOnly(torch.nn.Module):
    """A module without ``generate`` (decoded by the full forward)."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits


def _rollout(path: str) -> HFRollout:
    model = make_tiny_causal_lm(seed=0)
    config = {"dtype": "float32", "do_sample": False, "response_length": 7, "max_num_seqs": 2}
    if path == "loop":
        return HFRollout(LogitsOnly(model), config)
    rollout = HFRollout(model, config)
    rollout.use_static_cache = path == "static"
    return rollout


@pytest.mark.parametrize("path", ["static", "model_cache", "loop"])
def test_hook_sees_tokens_and_stops_rows(path, make_prompts, byte_prompts):
    prompts = make_prompts(byte_prompts, prompt_len=8)
    free = _rollout(path).generate_sequences(prompts)
    seen: dict[int, list[int]] = {}

    def on_step(step, rows, tokens, finished):
        assert tokens.shape == finished.shape == (len(range(*rows.indices(len(byte_prompts)))),)
        for i, token in zip(range(rows.start, rows.stop), tokens.tolist()):
            seen.setdefault(i, []).append(token)
        stop = torch.zeros_like(finished)
        if step == 2 and rows.start <= 1 < rows.stop:
            stop[1 - rows.start] = True  # stop row 1 after its third token
        return stop

    out = _rollout(path).generate_sequences(prompts, on_step=on_step)
    responses, mask = out.batch["responses"], out.batch["response_mask"]
    lengths = mask.sum(-1).tolist()
    assert lengths[1] == min(3, int(free.batch["response_mask"][1].sum()))
    assert torch.equal(responses[1, : lengths[1]], free.batch["responses"][1, : lengths[1]])
    assert bool((responses[1, lengths[1] :] == PAD).all())
    for row in (0, 2, 3, 4):  # the other rows are untouched (greedy: identical to the run without a hook)
        assert torch.equal(responses[row], free.batch["responses"][row])
        assert torch.equal(mask[row], free.batch["response_mask"][row])
    for row, tokens in seen.items():  # the hook saw exactly the kept tokens first
        assert tokens[: lengths[row]] == responses[row, : lengths[row]].tolist()
