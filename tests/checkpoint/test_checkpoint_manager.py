"""Tests of verl/checkpoint/checkpoint_manager.py (RNG, extra state, HF saves, safe loading) and
verl/checkpoint/optimizer_state.py (optimizer state keyed by parameter names)."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
import torch
from safetensors import safe_open

from verl.checkpoint.checkpoint_manager import (
    extra_state_filename,
    get_rng_state,
    load_extra_state,
    load_model_state_dict,
    safe_torch_load,
    save_extra_state,
    save_model_hf,
    set_rng_state,
)
from verl.checkpoint.optimizer_state import load_optimizer_shards, save_optimizer_shards
from verl.checkpoint.sharded_state import ShardReader, load_state_shards, save_state_shards


def _draw() -> tuple[torch.Tensor, np.ndarray, float, float]:
    return torch.rand(4), np.random.rand(4), random.random(), np.random.normal()


def test_rng_state_roundtrip_weights_only(tmp_path) -> None:
    np.random.normal()  # leave a cached gaussian in numpy's state
    random.gauss(0, 1)
    save_extra_state(str(tmp_path), rank=0, world_size=1)
    expected = _draw()
    _draw()  # move all generators on
    # The file must load with weights_only=True (no arbitrary unpickling) by itself.
    raw = torch.load(tmp_path / extra_state_filename(0, 1), weights_only=True)
    assert raw["rng"]["cpu"].dtype == torch.uint8
    load_extra_state(str(tmp_path), rank=0, world_size=1)
    got = _draw()
    assert torch.equal(expected[0], got[0])
    assert np.array_equal(expected[1], got[1])
    assert expected[2] == got[2] and expected[3] == got[3]


def test_get_set_rng_state_in_memory() -> None:
    state = get_rng_state()
    a = _draw()
    set_rng_state(state)
    b = _draw()
    assert torch.equal(a[0], b[0]) and a[2] == b[2]
    with pytest.raises(KeyError, match="numpy"):
        set_rng_state({"cpu": state["cpu"], "python": state["python"]})


def _train_steps(model: torch.nn.Module, opt: torch.optim.Optimizer, sched, steps: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(8, 4, generator=gen)
        loss = (model(x) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()


def _make(seed: int = 0, lrs: tuple[float, float] = (0.1, 0.01)):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    groups = [
        {"params": model[0].parameters(), "lr": lrs[0], "weight_decay": 0.1},
        {"params": model[2].parameters(), "lr": lrs[1], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, betas=(0.8, 0.95))
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return model, opt, sched


def test_optimizer_and_scheduler_resume_matches_uninterrupted(tmp_path) -> None:
    model, opt, sched = _make()
    _train_steps(model, opt, sched, 3, seed=1)
    path = str(tmp_path)
    save_state_shards(model.state_dict(), path, "model", rank=0, world_size=1)
    file = save_optimizer_shards(model, opt, path, rank=0, world_size=1)
    assert os.path.basename(file) == "optim_world_size_1_rank_0.safetensors"
    save_extra_state(path, 0, 1, lr_scheduler=sched, extra={"global_step": 3, "tag": "x"})
    _train_steps(model, opt, sched, 2, seed=2)  # uninterrupted reference
    reference = {k: v.clone() for k, v in model.state_dict().items()}

    # different init and different learning rates: everything must come from disk
    model2, opt2, sched2 = _make(seed=7, lrs=(0.5, 0.5))
    model2.load_state_dict(load_state_shards(ShardReader(path, "model"), model2.state_dict()))
    load_optimizer_shards(model2, opt2, path)
    extra = load_extra_state(path, 0, 1, lr_scheduler=sched2)
    assert extra == {"global_step": 3, "tag": "x"}
    assert sched2.last_epoch == 3
    # 0.1 and 0.01 halved once after 2 of the 3 steps
    assert [g["lr"] for g in opt2.param_groups] == pytest.approx([0.05, 0.005])
    assert [g["weight_decay"] for g in opt2.param_groups] == [0.1, 0.0]
    assert opt2.param_groups[0]["betas"] == (0.8, 0.95) and isinstance(opt2.param_groups[1]["betas"], tuple)
    assert float(opt2.state[model2[0].weight]["step"]) == 3.0
    _train_steps(model2, opt2, sched2, 2, seed=2)
    for k, v in reference.items():
        torch.testing.assert_close(model2.state_dict()[k], v, rtol=0, atol=0)


def test_load_optimizer_group_and_type_mismatch(tmp_path) -> None:
    model, opt, sched = _make()
    _train_steps(model, opt, sched, 1, seed=1)
    save_optimizer_shards(model, opt, str(tmp_path), 0, 1)
    one_group = torch.optim.AdamW(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="2 saved param groups, the optimizer has 1"):
        load_optimizer_shards(model, one_group, str(tmp_path))
    swapped = torch.optim.AdamW([{"params": model[2].parameters()}, {"params": model[0].parameters()}], lr=0.1)
    with pytest.raises(ValueError, match=r"param group 0 was saved for other parameters: not saved \['2\.bias'"):
        load_optimizer_shards(model, swapped, str(tmp_path))
    sgd = torch.optim.SGD([{"params": model[0].parameters()}, {"params": model[2].parameters()}], lr=0.1)
    with pytest.raises(ValueError, match="optimizer state of a AdamW, the run uses SGD"):
        load_optimizer_shards(model, sgd, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no optim shard files"):
        load_optimizer_shards(model, opt, str(tmp_path / "nowhere"))


def test_extra_state_after_a_world_size_change(tmp_path) -> None:
    draws = {}
    for rank in range(2):  # two "ranks" of a 2-rank save, with different RNG streams
        torch.manual_seed(10 + rank)
        save_extra_state(str(tmp_path), rank, 2, extra={"global_step": 5})
        draws[rank] = torch.rand(3)
    for rank, source in ((0, 0), (1, 1), (2, 0), (3, 0)):  # resumed on 4 ranks
        torch.manual_seed(99)
        assert load_extra_state(str(tmp_path), rank, 4) == {"global_step": 5}
        assert torch.equal(torch.rand(3), draws[source]), rank
    os.remove(tmp_path / extra_state_filename(1, 2))
    with pytest.raises(FileNotFoundError, match=r"extra_state_world_size_2_rank_1\.pt"):
        load_extra_state(str(tmp_path), 1, 2)


class _Evil:
    pass


def test_safe_load_refuses_pickled_objects_and_names_missing(tmp_path) -> None:
    path = tmp_path / "x.pt"
    torch.save({"obj": _Evil()}, path)
    with pytest.raises(ValueError, match="weights_only"):
        safe_torch_load(str(path), "extra state")
    with pytest.raises(FileNotFoundError, match=r"extra_state_world_size_2_rank_1\.pt \(expected lr scheduler"):
        load_extra_state(str(tmp_path), rank=1, world_size=2)
    (tmp_path / "t.pt").write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="corrupt"):
        safe_torch_load(str(tmp_path / "t.pt"), "something")
    torch.save({"something": 1}, tmp_path / extra_state_filename(0, 1))
    with pytest.raises(ValueError, match="not an extra-state file"):
        load_extra_state(str(tmp_path), 0, 1)


def test_save_model_hf_roundtrip(tmp_path, byte_tokenizer) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.models.tiny import make_tiny_causal_lm

    model = make_tiny_causal_lm(tokenizer=byte_tokenizer)
    gathered = {k: v.clone() for k, v in model.state_dict().items()}
    out = save_model_hf(model, byte_tokenizer, str(tmp_path / "hf"), state_dict=gathered)
    names = set(os.listdir(out))
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= names
    loaded = AutoModelForCausalLM.from_pretrained(out)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[k], v, rtol=0, atol=0)
    assert AutoTokenizer.from_pretrained(out)("hi").input_ids == byte_tokenizer("hi").input_ids
    reread = load_model_state_dict(out)
    assert set(reread) == set(gathered) and torch.equal(reread["lm_head.weight"], gathered["lm_head.weight"])
    with pytest.raises(FileNotFoundError, match="no weights in"):
        load_model_state_dict(str(tmp_path))


def test_save_model_hf_tied_weights_stored_once(tmp_path, byte_tokenizer) -> None:
    from transformers import AutoModelForCausalLM

    from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm

    model = make_tiny_causal_lm(TinyModelSpec(arch="qwen2", tie_word_embeddings=True), tokenizer=byte_tokenizer)
    gathered = {k: v.clone() for k, v in model.state_dict().items()}  # gathered copies: no shared storage
    out = save_model_hf(model, byte_tokenizer, str(tmp_path / "hf"), state_dict=gathered)
    with safe_open(os.path.join(out, "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "model.embed_tokens.weight" in keys and "lm_head.weight" not in keys
    loaded = AutoModelForCausalLM.from_pretrained(out)
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()
    torch.testing.assert_close(loaded.lm_head.weight, model.model.embed_tokens.weight, rtol=0, atol=0)


def test_save_model_hf_peft_saves_adapter_and_base(tmp_path, tiny_model_dir, byte_tokenizer) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    peft_model = get_peft_model(base, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"]))
    out = save_model_hf(peft_model, byte_tokenizer, str(tmp_path / "lora"), base_model_path="/models/base")
    names = set(os.listdir(out))
    assert {"adapter_model.safetensors", "adapter_config.json", "tokenizer.json"} <= names
    assert "model.safetensors" not in names
    with open(os.path.join(out, "adapter_config.json")) as f:
        assert json.load(f)["base_model_name_or_path"] == "/models/base"


def test_rng_state_has_one_home_importable_under_the_old_names():
    """``get_rng_state`` / ``set_rng_state`` live in :mod:`verl.checkpoint.rng_state` (no import circle between the
    base manager and the checkpoint helpers); both old module paths still give the same functions."""
    from verl.checkpoint import base_manager, checkpoint_manager, rng_state

    assert checkpoint_manager.get_rng_state is rng_state.get_rng_state
    assert checkpoint_manager.set_rng_state is rng_state.set_rng_state
    assert base_manager.BaseCheckpointManager.get_rng_state is rng_state.get_rng_state
    assert base_manager.BaseCheckpointManager.load_rng_state is rng_state.set_rng_state
