"""The offline YAML defaults and their dataclass schemas agree key for key and value for value."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from verl.trainer.config import load_config
from verl.trainer.config.offline_schema import DPOConfig, GKDConfig, KTOConfig, SFTConfig


@pytest.mark.parametrize("schema", [SFTConfig, DPOConfig, KTOConfig, GKDConfig])
def test_yaml_defaults_match_dataclass(schema) -> None:
    cfg = load_config([], config_name=schema.config_name, schema=schema)
    assert OmegaConf.to_container(cfg, resolve=True) == dataclasses.asdict(schema())


def test_cross_field_checks() -> None:
    from verl.trainer.config import ConfigError

    with pytest.raises(ConfigError) as err:
        load_config(
            ["label_smoothing=0.1", "loss_type=hinge", "data.max_prompt_length=2048", "trainer.namespace=../x"],
            config_name="dpo_trainer",
            schema=DPOConfig,
        )
    text = str(err.value)
    assert "label_smoothing: only applies to loss_type=sigmoid" in text
    assert "data.max_prompt_length" in text
    assert "trainer.namespace" in text


@pytest.mark.parametrize("schema", [SFTConfig, DPOConfig, KTOConfig, GKDConfig])
def test_trust_remote_code_needs_the_unsafe_switch(schema, model_dir_with_code) -> None:
    from verl.trainer.config import ConfigError

    code = [f"model.path={model_dir_with_code}", "model.trust_remote_code=true"]
    with pytest.raises(ConfigError, match="trust_remote_code=true .* trainer.allow_unsafe_operations=true"):
        load_config(code, config_name=schema.config_name, schema=schema)
    cfg = load_config(code + ["trainer.allow_unsafe_operations=true"], config_name=schema.config_name, schema=schema)
    assert cfg.model.trust_remote_code is True
    # the default model has no code of its own: nothing would run, nothing to refuse
    assert load_config(["model.trust_remote_code=true"], config_name=schema.config_name, schema=schema).model


@pytest.mark.parametrize("schema", [SFTConfig, DPOConfig, KTOConfig])
def test_fsdp_size_is_minus_one_or_a_group_size(schema) -> None:
    """``model.fsdp_size``: -1 or any group size >= 1 at config time (the world size is only known at launch, where
    a size that does not divide it is refused: tests/trainer/offline/test_hsdp.py); 0 and < -1 are refused."""
    from verl.trainer.config import ConfigError

    for size in (-1, 1, 16):
        assert load_config([f"model.fsdp_size={size}"], schema.config_name, schema=schema).model.fsdp_size == size
    for size in (0, -2):
        with pytest.raises(ConfigError, match=rf"model.fsdp_size: must be -1 \(shard over all ranks\) .*got {size}"):
            load_config([f"model.fsdp_size={size}"], config_name=schema.config_name, schema=schema)
