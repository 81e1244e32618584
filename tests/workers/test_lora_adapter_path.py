"""``actor_rollout_ref.model.lora_adapter_path``: LoRA training continues from a saved PEFT adapter."""

from __future__ import annotations

import os

import pytest
import torch

from tests.workers.test_fsdp_workers import (
    _actor_group,
    _base_model,
    _config,
    _hf_response_log_probs,
    _scored_batch,
    _with_old_log_probs,
)

pytest.importorskip("peft")


def _saved_adapter(model_dir: str, out: str) -> torch.nn.Module:
    """A rank-4, alpha-8 adapter on the attention projections with non-zero ``lora_B`` (a changed model), saved
    to ``out``; returns the PEFT model it came from."""
    from verl.models.lora import apply_lora

    peft_model = apply_lora(_base_model(model_dir), 4, 8, ["q_proj", "v_proj"])
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    peft_model.save_pretrained(out)
    return peft_model.eval()


def test_training_starts_from_the_saved_adapter(tiny_model_dir: str, tmp_path) -> None:
    saved = _saved_adapter(tiny_model_dir, str(tmp_path / "adapter"))
    group = _actor_group(
        tiny_model_dir, "actor_rollout_ref", f"actor_rollout_ref.model.lora_adapter_path={tmp_path / 'adapter'}"
    )
    worker = group.workers[0]
    assert worker.ref_module is None  # LoRA: the reference is the actor with its adapters off
    cfg = worker.actor_module.peft_config["default"]
    assert (cfg.r, cfg.lora_alpha, set(cfg.target_modules)) == (4, 8, {"q_proj", "v_proj"})

    data = _scored_batch()
    mask = data.batch["response_mask"]
    expected = _hf_response_log_probs(saved, data)
    base = _hf_response_log_probs(_base_model(tiny_model_dir), data)
    actor = group.compute_log_prob(data).batch["old_log_probs"] * mask
    torch.testing.assert_close(actor, expected, atol=1e-5, rtol=0)
    assert (expected - base).abs().max() > 1e-3  # the saved adapter changed the model
    ref = group.compute_ref_log_prob(data).batch["ref_log_prob"] * mask
    torch.testing.assert_close(ref, base, atol=1e-5, rtol=0)

    # the rollout generates from the same adapted weights (merged into the weights it is handed)
    from verl.models.lora import merged_state_dict

    handed = dict(worker._merged_lora_weights(worker.actor_module))
    want = merged_state_dict(saved.state_dict(), 8 / 4)
    key = next(k for k in handed if k.endswith("q_proj.weight"))
    torch.testing.assert_close(handed[key], want[key], atol=1e-6, rtol=0)
    assert not torch.allclose(want[key], dict(_base_model(tiny_model_dir).named_parameters())[key])

    before = {n: p.detach().clone() for n, p in worker.actor_module.named_parameters() if p.requires_grad}
    assert before and all("lora_" in n for n in before)
    group.update_actor(_with_old_log_probs(group, data))
    after = dict(worker.actor_module.named_parameters())
    assert any(not torch.equal(after[n], v) for n, v in before.items())  # gradients reached the adapter


@pytest.mark.parametrize(
    ("remove", "extra", "fragment"),
    [
        (None, "", "no such directory"),
        ("adapter_config.json", "", "missing adapter_config.json"),
        ("adapter_model.safetensors", "", "missing adapter_model.safetensors or adapter_model.bin"),
        (None, "actor_rollout_ref.model.lora_rank=8", "the adapter has rank r=4"),
    ],
)
def test_bad_adapter_path_is_one_line_naming_key_and_file(tiny_model_dir, tmp_path, remove, extra, fragment):
    from verl.models.lora import build_lora
    from verl.trainer.ppo.runner import check_lora_adapter_path
    from verl.utils.errors import ConfigError

    path = tmp_path / "adapter"
    if remove is not None or extra:
        _saved_adapter(tiny_model_dir, str(path))
    if remove is not None:
        os.remove(path / remove)
    # the config loads (as a data or model path, the files are looked at when the run starts)
    cfg = _config(tiny_model_dir, f"actor_rollout_ref.model.lora_adapter_path={path}", *([extra] if extra else []))
    with pytest.raises(ConfigError) as info:  # the driver, before any worker starts
        check_lora_adapter_path(cfg.actor_rollout_ref.model)
    lines = [ln for ln in str(info.value).splitlines() if "lora_adapter_path" in ln]
    assert len(lines) == 1 and fragment in lines[0] and str(path) in lines[0]
    if remove is not None:  # a worker given the same path says the same
        with pytest.raises(ValueError, match=fragment):
            build_lora(_base_model(tiny_model_dir), cfg.actor_rollout_ref.model)
