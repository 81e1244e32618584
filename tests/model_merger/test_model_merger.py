"""Tests of verl/model_merger: rank shards / full weights / LoRA adapters -> loadable Hugging Face dirs."""

from __future__ import annotations

import os

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.checkpoint.checkpoint_manager import save_model_hf
from verl.checkpoint.sharded_state import save_state_shards
from verl.model_merger import merge_checkpoint
from verl.model_merger.__main__ import main as merger_main
from verl.models.tiny import make_tiny_causal_lm

PROMPT = torch.tensor([[257, 72, 101, 108, 108, 111]])  # <bos> "Hello"


def _greedy(model: torch.nn.Module) -> list[int]:
    model.eval()
    with torch.no_grad():
        out = model.generate(PROMPT, attention_mask=torch.ones_like(PROMPT), max_new_tokens=8, do_sample=False)
    return out[0].tolist()


def _save_shards(state: dict[str, torch.Tensor], path: str, world_size: int = 2) -> None:
    """The model shards of a save on ``world_size`` ranks holding plain (replicated) tensors: rank 0 writes them,
    the others empty files (real FSDP2 blocks: tests/checkpoint/test_resharding.py)."""
    for rank in range(world_size):
        save_state_shards(state, path, "model", rank=rank, world_size=world_size)


@pytest.fixture
def actor_ckpt(tmp_path, byte_tokenizer):
    """A role dir: huggingface/ with weights of model B, rank shards with the weights of the trained model A."""
    trained = make_tiny_causal_lm(tokenizer=byte_tokenizer, seed=1)
    other = make_tiny_causal_lm(tokenizer=byte_tokenizer, seed=2)
    actor = tmp_path / "global_step_3" / "actor"
    save_model_hf(other, byte_tokenizer, str(actor / "huggingface"))
    _save_shards(trained.state_dict(), str(actor))
    return str(actor), trained, other


def test_merge_shards_cli_loads_and_generates(tmp_path, actor_ckpt) -> None:
    actor, trained, _other = actor_ckpt
    target = str(tmp_path / "merged")
    assert merger_main(["merge", "--backend", "fsdp", "--local_dir", actor, "--target_dir", target]) == 0
    merged = AutoModelForCausalLM.from_pretrained(target)
    for k, v in trained.state_dict().items():
        torch.testing.assert_close(merged.state_dict()[k], v, rtol=0, atol=0)
    assert _greedy(merged) == _greedy(trained)
    assert os.path.isfile(os.path.join(target, "tokenizer.json"))
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


def test_merge_full_weights_when_no_shards_and_dtype(tmp_path, actor_ckpt) -> None:
    actor, _trained, other = actor_ckpt
    for name in os.listdir(actor):
        if name.startswith("model_world_size_"):
            os.remove(os.path.join(actor, name))
    target = merge_checkpoint(actor, str(tmp_path / "bf16"), dtype="bfloat16")
    merged = AutoModelForCausalLM.from_pretrained(target)
    assert merged.dtype == torch.bfloat16
    for k, v in other.state_dict().items():
        torch.testing.assert_close(merged.state_dict()[k], v.to(torch.bfloat16), rtol=0, atol=0)


def test_merge_replaces_target_atomically(tmp_path, actor_ckpt) -> None:
    actor, trained, _ = actor_ckpt
    target = tmp_path / "out"
    target.mkdir()
    (target / "stale.txt").write_text("old")
    merge_checkpoint(actor, str(target))
    assert not (target / "stale.txt").exists() and (target / "config.json").is_file()
    os.remove(os.path.join(actor, "model_world_size_2_rank_1.safetensors"))
    with pytest.raises(FileNotFoundError, match="model_world_size_2_rank_1.safetensors"):
        merge_checkpoint(actor, str(target))
    # the previous merge is untouched
    torch.testing.assert_close(
        AutoModelForCausalLM.from_pretrained(str(target)).lm_head.weight, trained.lm_head.weight, rtol=0, atol=0
    )


def test_merge_errors_name_the_problem(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        merge_checkpoint(str(tmp_path / "nope"), str(tmp_path / "out"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="huggingface/config.json"):
        merge_checkpoint(str(tmp_path / "empty"), str(tmp_path / "out"))
    with pytest.raises(ValueError, match="unknown dtype 'int3'"):
        merge_checkpoint(str(tmp_path / "empty"), str(tmp_path / "out"), dtype="int3")


def test_merge_shards_with_wrong_keys_is_an_error(tmp_path, actor_ckpt) -> None:
    actor, trained, _ = actor_ckpt
    state = dict(trained.state_dict())
    state.pop("model.norm.weight")
    for name in os.listdir(actor):
        if name.startswith("model_world_size_"):
            os.remove(os.path.join(actor, name))
    _save_shards(state, actor, world_size=2)
    with pytest.raises(ValueError, match="model.norm.weight"):
        merge_checkpoint(actor, str(tmp_path / "out"))


def _lora_model(base_dir: str):
    from peft import LoraConfig, get_peft_model

    base = AutoModelForCausalLM.from_pretrained(base_dir)
    torch.manual_seed(5)
    # init_lora_weights=False: B is random too, so the adapter changes the model.
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    return get_peft_model(base, cfg)


def test_merge_lora_adapter_dir(tmp_path, tiny_model_dir, byte_tokenizer) -> None:
    peft_model = _lora_model(tiny_model_dir)
    adapter = str(tmp_path / "adapter")
    save_model_hf(peft_model, byte_tokenizer, adapter, base_model_path=tiny_model_dir)
    layer = peft_model.base_model.model.model.layers[0].self_attn.q_proj
    base_w = layer.base_layer.weight.detach().clone()
    # W' = W + (alpha / r) * B @ A (Hu et al., 2021, LoRA eq. 3)
    expected_q = base_w + (8 / 4) * layer.lora_B["default"].weight @ layer.lora_A["default"].weight
    with torch.no_grad():
        expected_logits = peft_model(PROMPT).logits

    target = merge_checkpoint(adapter, str(tmp_path / "merged"))
    merged = AutoModelForCausalLM.from_pretrained(target)
    torch.testing.assert_close(merged.model.layers[0].self_attn.q_proj.weight, expected_q, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        torch.testing.assert_close(merged(PROMPT).logits, expected_logits, rtol=1e-4, atol=1e-5)
    assert not any("lora" in k for k in merged.state_dict())
    assert not torch.allclose(merged.model.layers[0].self_attn.q_proj.weight, base_w)


def test_lora_in_actor_dir_without_merge(tmp_path, tiny_model_dir, byte_tokenizer) -> None:
    peft_model = _lora_model(tiny_model_dir)
    actor = tmp_path / "global_step_1" / "actor"
    save_model_hf(AutoModelForCausalLM.from_pretrained(tiny_model_dir), byte_tokenizer, str(actor / "huggingface"))
    save_model_hf(peft_model, byte_tokenizer, str(actor / "lora_adapter"), base_model_path=tiny_model_dir)
    target = merge_checkpoint(str(actor), str(tmp_path / "kept"), merge_lora=False)
    assert os.path.isfile(os.path.join(target, "lora_adapter", "adapter_model.safetensors"))
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    kept = AutoModelForCausalLM.from_pretrained(target)
    for k, v in base.state_dict().items():
        torch.testing.assert_close(kept.state_dict()[k], v, rtol=0, atol=0)
    merged = AutoModelForCausalLM.from_pretrained(merge_checkpoint(str(actor), str(tmp_path / "m")))
    with torch.no_grad():
        torch.testing.assert_close(merged(PROMPT).logits, peft_model(PROMPT).logits, rtol=1e-4, atol=1e-5)


def test_cli_rejects_unknown_backend(tmp_path, capsys) -> None:
    argv = ["merge", "--backend", "megatron", "--local_dir", str(tmp_path), "--target_dir", str(tmp_path / "o")]
    assert merger_main(argv) == 2
    assert "'megatron' is not supported" in capsys.readouterr().err


def test_lora_adapter_saved_in_huggingface_subdir(tmp_path, tiny_model_dir, byte_tokenizer) -> None:
    """A worker that calls PEFT's save_pretrained into actor/huggingface/ (adapter only, no config.json)."""
    peft_model = _lora_model(tiny_model_dir)
    actor = tmp_path / "global_step_2" / "actor"
    save_model_hf(peft_model, byte_tokenizer, str(actor / "huggingface"), base_model_path=tiny_model_dir)
    merged = AutoModelForCausalLM.from_pretrained(merge_checkpoint(str(actor), str(tmp_path / "m")))
    with torch.no_grad():
        torch.testing.assert_close(merged(PROMPT).logits, peft_model(PROMPT).logits, rtol=1e-4, atol=1e-5)
    assert os.path.isfile(tmp_path / "m" / "tokenizer.json")


def test_test_operation_compares_the_merged_weights_with_a_hf_dir(tmp_path, actor_ckpt, byte_tokenizer, capsys) -> None:
    """Upstream CI's check after a save with hf_model: ``test --local_dir <role dir> --test_hf_dir <hf dir>``."""
    actor, _trained, _other = actor_ckpt
    argv = ["test", "--backend", "fsdp", "--local_dir", actor, "--test_hf_dir"]
    # the role dir's own huggingface/ holds another model's weights: every differing tensor is named
    assert merger_main([*argv, os.path.join(actor, "huggingface")]) == 1
    err = capsys.readouterr().err
    assert "does not match" in err and "model.embed_tokens.weight: values differ" in err
    # the trained weights (seed 1, as the shards) in Hugging Face form, fp32 and bf16 (compared at its precision)
    for dtype in (torch.float32, torch.bfloat16):
        reference = str(tmp_path / f"ref_{dtype}".replace("torch.", ""))
        save_model_hf(make_tiny_causal_lm(tokenizer=byte_tokenizer, seed=1).to(dtype), byte_tokenizer, reference)
        assert merger_main([*argv, reference, "--use_cpu_initialization"]) == 0
        assert f"tensors of {actor} match {reference}" in capsys.readouterr().out
    assert merger_main([*argv, str(tmp_path / "absent")]) == 2
    assert "no weights in" in capsys.readouterr().err


def test_upstream_flags_it_cannot_honour_are_refused_in_one_line(tmp_path, actor_ckpt, capsys) -> None:
    actor, _trained, _other = actor_ckpt
    base = ["merge", "--backend", "fsdp", "--local_dir", actor, "--target_dir", str(tmp_path / "m")]
    for extra, word in ((["--tie-word-embedding"], "Megatron"), (["--hf_upload_path", "me/model"], "hf upload")):
        assert merger_main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert word in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "m")
