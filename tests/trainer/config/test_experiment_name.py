"""The default trainer.experiment_name: derived from what the run trains, stable, path-safe, followed by
default_local_dir; the demo keeps ``demo`` and a name the user sets wins."""

from __future__ import annotations

import pytest

from verl.trainer.config import load_config
from verl.trainer.config.experiment_name import data_basename, derive_experiment_name, model_basename
from verl.trainer.config.fsdp_sft_schema import FSDPSFTConfig
from verl.trainer.config.offline_schema import DPOConfig, GKDConfig, KTOConfig, SFTConfig


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen2.5-0.5B-Instruct"),
        ("/models/Qwen2.5-0.5B-Instruct/", "Qwen2.5-0.5B-Instruct"),
        ("bundled://smollm2-135m-instruct", "smollm2-135m-instruct"),
        ("/cache/hub/models--Qwen--Qwen2.5-0.5B/snapshots/" + "a1" * 20, "Qwen2.5-0.5B"),
        ("<LlamaForCausalLM object>", "LlamaForCausalLM-object"),
        (None, ""),
    ],
)
def test_model_basename(path, name) -> None:
    assert model_basename(path) == name


@pytest.mark.parametrize(
    ("files", "name"),
    [
        ("~/data/gsm8k/train.parquet", "gsm8k"),
        ("/hf/openai/gsm8k/main/train-00000-of-00001.parquet", "gsm8k"),
        ("bundled://arithmetic/train.parquet", "arithmetic"),
        ("/data/my prefs.jsonl", "my-prefs"),
        ("/data/chat.jsonl.gz", "chat"),
        (["/d/math/train.parquet", "/d/code/train.parquet", "/d/x.parquet"], "math+2"),
        ("train.parquet", "train"),
        (None, ""),
        ([], ""),
    ],
)
def test_data_basename(files, name) -> None:
    assert data_basename(files) == name


def test_derived_name() -> None:
    assert derive_experiment_name("grpo", "Qwen/Qwen2.5-0.5B-Instruct", "~/data/gsm8k/train.parquet") == (
        "grpo-Qwen2.5-0.5B-Instruct-gsm8k"
    )
    assert derive_experiment_name("gae", "m", "d.parquet", 16) == "ppo-m-d-lora16"  # gae is what PPO users call ppo
    assert derive_experiment_name("sft", None, None) == "sft"
    assert derive_experiment_name("../../etc", "a/../b", None) == "etc-b"  # never a path that climbs out


def test_ppo_default_follows_what_the_run_trains_and_default_local_dir_follows_it() -> None:
    keys = [
        "data.train_files=~/data/gsm8k/train.parquet",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.n=4",
    ]
    a = load_config([*keys, "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct"])
    b = load_config([*keys, "actor_rollout_ref.model.path=meta-llama/Llama-3.2-1B"])
    assert a.trainer.experiment_name == "grpo-Qwen2.5-0.5B-Instruct-gsm8k"
    assert a.trainer.default_local_dir == "outputs/verl/grpo-Qwen2.5-0.5B-Instruct-gsm8k"
    assert b.trainer.default_local_dir == "outputs/verl/grpo-Llama-3.2-1B-gsm8k"
    # stable: the same command gets the same directory (so resume_mode=auto resumes it)
    assert load_config([*keys, "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct"]) == a
    lora = load_config(
        [*keys, "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct", "actor_rollout_ref.model.lora_rank=8"]
    )
    assert lora.trainer.experiment_name == "grpo-Qwen2.5-0.5B-Instruct-gsm8k-lora8"
    # a user-set interpolation of the name keeps working
    c = load_config([*keys, "trainer.default_local_dir=/ckpt/${trainer.experiment_name}/x"])
    assert c.trainer.default_local_dir == f"/ckpt/{c.trainer.experiment_name}/x"


def test_user_name_wins_and_the_demo_keeps_its_own() -> None:
    cfg = load_config(["data.train_files=~/data/gsm8k/train.parquet", "trainer.experiment_name=mine"])
    assert (cfg.trainer.experiment_name, cfg.trainer.default_local_dir) == ("mine", "outputs/verl/mine")
    demo = load_config([])  # no data.train_files: the embedded demo
    assert (demo.trainer.experiment_name, demo.trainer.default_local_dir) == ("demo", "outputs/verl/demo")


@pytest.mark.parametrize("schema", [SFTConfig, DPOConfig, KTOConfig, GKDConfig])
def test_offline_defaults(schema) -> None:
    algo = schema.config_name.removesuffix("_trainer")
    cfg = load_config(
        ["data.train_files=/d/ultrachat/train.parquet", "model.path=Qwen/Qwen2.5-0.5B", "model.lora_rank=4"],
        config_name=schema.config_name,
        schema=schema,
    )
    assert cfg.trainer.experiment_name == f"{algo}-Qwen2.5-0.5B-ultrachat-lora4"
    assert cfg.trainer.default_local_dir == f"outputs/verl/{algo}-Qwen2.5-0.5B-ultrachat-lora4"


def test_fsdp_sft_default() -> None:
    cfg = load_config(
        ["data.train_files=~/data/gsm8k/train.parquet", "model.partial_pretrain=Qwen/Qwen2.5-0.5B-Instruct"],
        config_name=FSDPSFTConfig.config_name,
        schema=FSDPSFTConfig,
    )
    assert cfg.trainer.default_local_dir == "checkpoints/verl/sft-Qwen2.5-0.5B-Instruct-gsm8k"


def test_the_mode_is_part_of_the_name() -> None:
    from verl.trainer.config.experiment_name import run_mode

    assert run_mode(None, False) == "" and run_mode("null", "false") == ""
    assert run_mode("one_step_off", False) == "one-step-off" and run_mode("fully_async", True) == "fully-async-agent"
    assert run_mode(None, True) == "agent"
    data = "data.train_files=~/data/gsm8k/train.parquet"
    names = {
        load_config(
            [data, "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2", *extra]
        ).trainer.experiment_name
        for extra in (
            [],
            ["actor_rollout_ref.rollout.multi_turn.enable=true"],
            ["async_training.mode=one_step_off"],
            ["async_training.mode=fully_async"],
        )
    }
    assert names == {
        "grpo-smollm2-135m-instruct-gsm8k",
        "grpo-smollm2-135m-instruct-gsm8k-agent",
        "grpo-smollm2-135m-instruct-gsm8k-one-step-off",
        "grpo-smollm2-135m-instruct-gsm8k-fully-async",
    }


def test_documented_commands_without_data_get_their_own_demo_directory() -> None:
    """make demo, the agent-loop page's command, one_step_off_policy.main_ppo, another estimator or model: each its
    own directory under outputs/verl/, so none resumes or rewrites the demo's run."""
    from verl.experimental.one_step_off_policy.main_ppo import MODE_OVERRIDE

    cases = {
        "demo": [],
        "demo-agent": ["actor_rollout_ref.rollout.multi_turn.enable=true", "data.train_batch_size=4"],
        "demo-one-step-off": [MODE_OVERRIDE],
        "demo-ppo": ["algorithm.adv_estimator=gae"],
        "demo-tiny-lora8": ["actor_rollout_ref.model.path=/m/tiny", "actor_rollout_ref.model.lora_rank=8"],
    }
    for name, overrides in cases.items():
        trainer = load_config(overrides).trainer
        assert trainer.experiment_name == name, overrides
        assert trainer.default_local_dir == f"outputs/verl/{name}"


def test_the_demo_constants_match_the_packaged_yaml() -> None:
    from verl.trainer.config.experiment_name import DEMO_ALGORITHM, DEMO_MODEL

    cfg = load_config([])
    assert cfg.algorithm.adv_estimator == DEMO_ALGORITHM
    assert model_basename(cfg.actor_rollout_ref.model.path).lower() == DEMO_MODEL
