"""Tests of verl/utils/checkpoint/checkpoint_manager.py: RNG, optimizer/extra state, HF saves, safe loading."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
import torch
from safetensors import safe_open

from verl.utils.checkpoint.checkpoint_manager import (
    check_checkpoint_files,
    extra_state_filename,
    get_rng_state,
    load_extra_state,
    load_model_state_dict,
    load_optimizer,
    safe_torch_load,
    save_extra_state,
    save_model_hf,
    save_optimizer,
    set_rng_state,
)


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


def _make(lr: float = 0.1):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return model, opt, sched


def test_optimizer_and_scheduler_resume_matches_uninterrupted(tmp_path) -> None:
    model, opt, sched = _make()
    _train_steps(model, opt, sched, 3, seed=1)
    save_optimizer(opt, str(tmp_path), rank=0, world_size=1)
    save_extra_state(str(tmp_path), 0, 1, lr_scheduler=sched, extra={"global_step": 3, "tag": "x"})
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    _train_steps(model, opt, sched, 2, seed=2)  # uninterrupted reference
    reference = {k: v.clone() for k, v in model.state_dict().items()}

    model2, opt2, sched2 = _make(lr=0.5)  # different lr: must be overwritten by the loaded state
    model2.load_state_dict(weights)
    load_optimizer(opt2, str(tmp_path), rank=0, world_size=1)
    extra = load_extra_state(str(tmp_path), 0, 1, lr_scheduler=sched2)
    assert extra == {"global_step": 3, "tag": "x"}
    assert sched2.last_epoch == 3 and opt2.param_groups[0]["lr"] == pytest.approx(0.05)  # 0.1 * 0.5 after 2 steps
    _train_steps(model2, opt2, sched2, 2, seed=2)
    for k, v in reference.items():
        torch.testing.assert_close(model2.state_dict()[k], v, rtol=0, atol=0)


def test_load_optimizer_group_mismatch(tmp_path) -> None:
    model, opt, _ = _make()
    save_optimizer(opt, str(tmp_path), 0, 1)
    other = torch.optim.SGD([{"params": [model[0].weight]}, {"params": [model[2].weight]}], lr=0.1)
    with pytest.raises(ValueError, match="1 param groups saved but the optimizer has 2"):
        load_optimizer(other, str(tmp_path), 0, 1)


class _Evil:
    pass


def test_safe_load_refuses_pickled_objects_and_names_missing(tmp_path) -> None:
    path = tmp_path / "x.pt"
    torch.save({"obj": _Evil()}, path)
    with pytest.raises(ValueError, match="weights_only"):
        safe_torch_load(str(path), "extra state")
    with pytest.raises(FileNotFoundError, match=r"optim_world_size_2_rank_1\.pt \(expected optimizer state"):
        load_optimizer(_make()[1], str(tmp_path), rank=1, world_size=2)
    (tmp_path / "t.pt").write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="corrupt"):
        safe_torch_load(str(tmp_path / "t.pt"), "something")


def test_check_checkpoint_files_lists_all_missing(tmp_path) -> None:
    save_extra_state(str(tmp_path), 0, 2)
    with pytest.raises(FileNotFoundError) as err:
        check_checkpoint_files(str(tmp_path), 0, 2, ["model", "optimizer", "extra", "hf_model"])
    msg = str(err.value)
    assert "model_world_size_2_rank_0.safetensors" in msg and "optim_world_size_2_rank_0.pt" in msg
    assert "huggingface/config.json" in msg and "extra_state" not in msg
    with pytest.raises(ValueError, match="unknown checkpoint content 'weights'"):
        check_checkpoint_files(str(tmp_path), 0, 2, ["weights"])


def test_save_model_hf_roundtrip(tmp_path, byte_tokenizer) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.utils.tiny_models import make_tiny_causal_lm

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

    from verl.utils.tiny_models import TinyModelSpec, make_tiny_causal_lm

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
