"""The colocated weight sync into a vLLM engine, read back: a normal sync passes; a sync whose engine keeps an old
tensor, or never reads one from the stream, stops with WeightSyncMismatchError naming it."""

from __future__ import annotations

import importlib.util
import itertools

import pytest
import torch
from omegaconf import OmegaConf

from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm
from verl.workers.rollout.weight_digest import WeightSyncMismatchError
from verl.workers.rollout_engine import RolloutEngineMixin

HAS_VLLM = importlib.util.find_spec("vllm") is not None
pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.skipif(not HAS_VLLM, reason="vllm is not installed")]

SPEC = TinyModelSpec(
    arch="qwen2", hidden_size=128, num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True
)


class _Worker(RolloutEngineMixin):
    """The rollout half of an actor worker: one rank, the actor's weights from ``model``."""

    def __init__(self, rollout, model: torch.nn.Module, check: bool = True) -> None:
        self.rollout, self.rollout_name, self.rank, self.model = rollout, "vllm", 0, model
        self.config = OmegaConf.create({"rollout": {"check_weight_sync": check, "tensor_model_parallel_size": 1}})

    def _rollout_weights(self):
        return iter(list(self.model.state_dict().items()))


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from verl.workers.rollout.vllm_rollout import vLLMRollout

    path = str(tmp_path_factory.mktemp("vllm_digest"))
    make_tiny_causal_lm(SPEC, save_dir=path, seed=0)
    cfg = OmegaConf.create(
        dict(
            name="vllm",
            temperature=1.0,
            top_p=1.0,
            top_k=-1,
            do_sample=True,
            prompt_length=8,
            response_length=6,
            min_new_tokens=0,
            dtype="float32",
            max_num_seqs=8,
            calculate_log_probs=True,
            enforce_eager=True,
            free_cache_engine=False,
            seed=0,
            val_kwargs=dict(do_sample=False, temperature=0.0, top_p=1.0, top_k=-1, n=1),
        )
    )
    rollout = vLLMRollout(path, cfg)
    yield rollout
    rollout.shutdown()


def test_normal_sync_passes_and_corruptions_are_named(engine, monkeypatch):
    new = make_tiny_causal_lm(SPEC, seed=1)
    _Worker(engine, new)._sync_rollout_weights()  # every tensor changed, every one checked

    real = type(engine).update_weights

    def keeps_old_norm(self, named_tensors=None, **kwargs):  # the engine silently keeps one old tensor
        return real(self, ((n, t * 0 + 1 if n == "model.norm.weight" else t) for n, t in named_tensors), **kwargs)

    monkeypatch.setattr(type(engine), "update_weights", keeps_old_norm)
    with torch.no_grad():
        new.model.norm.weight.mul_(1.5)
    with pytest.raises(WeightSyncMismatchError, match=r"1 of \d+ tensors differ: model\.norm\.weight: trainer sum"):
        _Worker(engine, new)._sync_rollout_weights()

    def stops_reading_early(self, named_tensors=None, **kwargs):  # an engine that ends its read too soon
        return real(self, itertools.islice(named_tensors, 14), **kwargs)  # of 26 tensors; the caller drains the rest

    monkeypatch.setattr(type(engine), "update_weights", stops_reading_early)
    with torch.no_grad():
        for p in new.parameters():
            p.mul_(1.1)
    # layer 1's tensors come after the 14th: those the CPU backend repacked are named as never read, the readable
    # ones (its norms, the final norm) by their sums
    with pytest.raises(WeightSyncMismatchError, match=r"tensors differ: model\.layers\.1\."):
        _Worker(engine, new)._sync_rollout_weights()
    monkeypatch.setattr(type(engine), "update_weights", real)
    _Worker(engine, new)._sync_rollout_weights()  # a full sync puts things right again
