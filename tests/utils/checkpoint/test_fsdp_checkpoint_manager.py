"""Tests of verl/utils/checkpoint/fsdp_checkpoint_manager.py on a plain module and on FSDP2 with one rank."""

from __future__ import annotations

import os

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
from verl.utils.checkpoint.layout import finalize_checkpoint, find_latest_ckpt_path
from verl.utils.tiny_models import make_tiny_causal_lm


def _step(model: torch.nn.Module, opt: torch.optim.Optimizer, sched) -> None:
    ids = torch.tensor([[257, 10, 20, 30, 40]])
    loss = model(input_ids=ids, labels=ids).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()


def _setup(tokenizer, seed: int):
    model = make_tiny_causal_lm(tokenizer=tokenizer, seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    return model, opt, sched


def test_save_load_resume_plain_model(tmp_path, byte_tokenizer) -> None:
    model, opt, sched = _setup(byte_tokenizer, seed=0)
    _step(model, opt, sched)
    mgr = FSDPCheckpointManager(model, opt, sched, processing_class=byte_tokenizer)
    actor = str(tmp_path / "global_step_1" / "actor")
    mgr.save_checkpoint(actor, global_step=1, extra={"epoch": 0})
    finalize_checkpoint(str(tmp_path), 1)
    assert find_latest_ckpt_path(str(tmp_path)) == os.path.dirname(actor)
    names = set(os.listdir(actor))
    assert {
        "model_world_size_1_rank_0.safetensors",
        "model_world_size_1_index.json",
        "huggingface",
        "optim_world_size_1_rank_0.pt",
        "extra_state_world_size_1_rank_0.pt",
    } <= names
    hf = AutoModelForCausalLM.from_pretrained(os.path.join(actor, "huggingface"))
    torch.testing.assert_close(hf.lm_head.weight, model.lm_head.weight, rtol=0, atol=0)

    _step(model, opt, sched)
    reference = {k: v.clone() for k, v in model.state_dict().items()}

    model2, opt2, sched2 = _setup(byte_tokenizer, seed=9)  # different init: everything must come from disk
    extra = FSDPCheckpointManager(model2, opt2, sched2).load_checkpoint(actor)
    assert extra == {"global_step": 1, "epoch": 0}
    assert sched2.last_epoch == 1
    _step(model2, opt2, sched2)
    for k, v in reference.items():
        torch.testing.assert_close(model2.state_dict()[k], v, rtol=0, atol=0)


def test_load_falls_back_to_hf_weights(tmp_path, byte_tokenizer) -> None:
    model, opt, sched = _setup(byte_tokenizer, seed=0)
    actor = str(tmp_path / "actor")
    FSDPCheckpointManager(model, opt, sched, byte_tokenizer, save_contents=["hf_model", "extra"]).save_checkpoint(actor)
    model2, _, _ = _setup(byte_tokenizer, seed=3)
    FSDPCheckpointManager(model2, load_contents=["model"]).load_checkpoint(actor)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(model2.state_dict()[k], v, rtol=0, atol=0)
    with pytest.raises(FileNotFoundError, match="optim_world_size_1_rank_0.pt"):
        FSDPCheckpointManager(model2, opt).load_checkpoint(actor)
    with pytest.raises(ValueError, match="unknown checkpoint content 'weights'"):
        FSDPCheckpointManager(model2, save_contents=["weights"])


def test_fsdp2_save_load(tmp_path, single_rank_group) -> None:
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    def make(seed: int):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Linear(5, 2))
        fully_shard(model)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        return model, opt

    def step(model, opt) -> None:
        loss = model(torch.ones(4, 3)).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()

    model, opt = make(0)
    step(model, opt)
    contents = ["model", "optimizer", "extra"]
    FSDPCheckpointManager(model, opt, save_contents=contents).save_checkpoint(str(tmp_path / "c"), global_step=4)
    step(model, opt)
    reference = model[1].weight.full_tensor().clone()

    model2, opt2 = make(1)
    assert FSDPCheckpointManager(model2, opt2).load_checkpoint(str(tmp_path / "c")) == {"global_step": 4}
    assert isinstance(model2[1].weight, DTensor)
    step(model2, opt2)
    torch.testing.assert_close(model2[1].weight.full_tensor(), reference, rtol=0, atol=0)
