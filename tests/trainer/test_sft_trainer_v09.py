"""``python -m verl.trainer.sft_trainer``: upstream verl v0.9's SFT keys accepted (every FSDP script of upstream's
examples/sft keeps what it asked), translated onto the one SFT trainer, the other engines refused, and one short run.
"""

from __future__ import annotations

import dataclasses
import json
import os
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf

from verl.trainer import sft_trainer
from verl.trainer.config.loader import load_config
from verl.trainer.config.sft_engine_checks import to_sft_overrides
from verl.trainer.config.sft_engine_schema import SFTEngineConfig

DATA = ["data.train_files=/d/train.parquet", "data.val_files=/d/test.parquet"]
LOGGER = 'trainer.logger=["console","wandb"]'

# The arguments upstream's v0.9 examples/sft FSDP scripts give (recorded through a stub torchrun, HOME=/home/user,
# `bash run_x.sh 8 /ckpt`, default environment).
V09_FSDP_SCRIPTS = {
    "gsm8k/run_deepseek_coder_6_7b_fsdp.sh": [
        *DATA, "data.messages_key=messages", "data.micro_batch_size_per_gpu=4", "optim.lr=1e-4", "engine=fsdp",
        "model.path=deepseek-ai/deepseek-coder-6.7b-instruct", "trainer.default_local_dir=/ckpt",
        "trainer.project_name=gsm8k-sft", "trainer.experiment_name=gsm8k-sft-deepseek-coder-6.7b-instruct",
        "trainer.total_epochs=4", LOGGER,
    ],
    "gsm8k/run_gemma_2b_fsdp.sh": [
        *DATA, "data.messages_key=messages", "data.micro_batch_size_per_gpu=4", "model.path=google/gemma-2b-it",
        "optim.lr=1e-4", "engine=fsdp", "trainer.default_local_dir=/ckpt", "trainer.project_name=gsm8k-sft",
        "trainer.experiment_name=gsm8k-sft-gemma-2b-it", "trainer.total_epochs=2", LOGGER,
    ],
    "gsm8k/run_gemma_7b_fsdp.sh": [
        *DATA, "data.messages_key=messages", "data.micro_batch_size_per_gpu=4", "optim.lr=1e-4", "engine=fsdp",
        "model.path=google/gemma-1.1-7b-it", "trainer.default_local_dir=/ckpt", "trainer.project_name=gsm8k-sft",
        "trainer.experiment_name=gsm8k-sft-gemma-1.1-7b-it", "trainer.total_epochs=4", LOGGER,
    ],
    "gsm8k/run_qwen2_5_0_5b_fsdp.sh (USE_LIGER=1 USE_PEFT=1)": [
        *DATA, "data.messages_key=messages", "data.micro_batch_size_per_gpu=4", "optim.lr=1e-4", "engine=fsdp",
        "engine.ulysses_sequence_parallel_size=1", "model.path=Qwen/Qwen2.5-0.5B-Instruct",
        "model.use_remove_padding=true", "trainer.default_local_dir=/ckpt", "trainer.project_name=gsm8k-sft",
        "trainer.experiment_name=gsm8k-sft-qwen2_5_0_5b", LOGGER, "trainer.total_epochs=1", "model.use_liger=True",
        "model.lora_rank=32", "model.lora_alpha=16", "model.target_modules=all-linear",
    ],
    "gsm8k/run_qwen3_8b_fsdp.sh": [
        *DATA, "data.micro_batch_size_per_gpu=64", "data.messages_key=messages", "data.ignore_input_ids_mismatch=True",
        "optim.lr=1e-4", "engine=fsdp", "engine.ulysses_sequence_parallel_size=2", "model.path=Qwen/Qwen3-8B",
        "model.use_remove_padding=true", "trainer.default_local_dir=/ckpt", "trainer.project_name=gsm8k-sft",
        "trainer.experiment_name=gsm8k-sft-qwen3-8b-instruct", LOGGER, "trainer.total_epochs=2",
        "model.lora_rank=32", "model.lora_alpha=16", "model.target_modules=all-linear",
    ],
    "gsm8k/run_seed_oss_36b_fsdp.sh": [
        *DATA, "data.micro_batch_size_per_gpu=4", "optim.lr=1e-4", "engine=fsdp",
        "engine.ulysses_sequence_parallel_size=2", "model.path=ByteDance-Seed/Seed-OSS-36B-Base",
        "model.use_remove_padding=true", "trainer.default_local_dir=/ckpt", "trainer.project_name=gsm8k-sft",
        "trainer.experiment_name=gsm8k-sft-seed-oss-36b", "trainer.logger=console", "trainer.total_training_steps=1",
    ],
    "multiturn/run_qwen2_5_0_5b_fsdp.sh": [
        "data.train_files=/d/multiturn/train.parquet", "data.val_files=/d/multiturn/test.parquet",
        "data.messages_key=messages", "data.micro_batch_size_per_gpu=4", "model.path=Qwen/Qwen2.5-0.5B-Instruct",
        "model.use_remove_padding=true", "engine=fsdp", "engine.ulysses_sequence_parallel_size=1",
        "trainer.default_local_dir=/ckpt", "trainer.project_name=multiturn-sft",
        "trainer.experiment_name=multiturn-sft-qwen2_5_0_5b", LOGGER, "trainer.total_training_steps=1",
    ],
    "vlm/run_qwen3_vl_2b_fsdp.sh (also January's vlm/run_qwen3_vl_2b.sh)": [
        "data.train_files=/d/pokemon-gpt4o-captions/train.parquet", "data.train_batch_size=96",
        "data.max_length=2048", "data.pad_mode=no_padding", "data.truncation=error", "data.use_dynamic_bsz=True",
        "data.max_token_len_per_gpu=65536", "model.path=/m/Qwen3-VL-2B-Instruct", "model.use_remove_padding=True",
        "engine=fsdp", "optim=fsdp", "optim.lr=2e-5", "optim.lr_warmup_steps_ratio=0.01", "optim.weight_decay=0.1",
        "optim.betas=[0.9,0.95]", "optim.clip_grad=1.0", "optim.min_lr_ratio=0.1", "optim.warmup_style=cosine",
        "engine.ulysses_sequence_parallel_size=2", "engine.strategy=fsdp2", "engine.fsdp_size=-1",
        "trainer.test_freq=-1", "trainer.save_freq=4000", "trainer.logger=[console,wandb]",
        "trainer.project_name=verl_sft_test", "trainer.experiment_name=pokemon-qwen3-2b-fsdp-fsdp2-sp2-fsdp-1202a1",
        "trainer.total_epochs=10", "trainer.default_local_dir=/ckpt/pokemon", "trainer.resume_mode=auto",
        "trainer.max_ckpt_to_keep=5", "checkpoint.save_contents=[model,optimizer,extra]",
    ],
}  # fmt: skip


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return float(a) == float(b)
    return a == b


def test_yaml_defaults_match_the_schema() -> None:
    cfg = load_config([], config_name="sft_trainer_engine", schema=SFTEngineConfig)
    assert OmegaConf.to_container(cfg, resolve=True) == dataclasses.asdict(SFTEngineConfig())


def test_unset_experiment_name_follows_the_run(capsys) -> None:
    """Upstream's fixed `test` would put every run in one directory; here the name follows model, data and LoRA."""
    assert sft_trainer.main(["--cfg", "job", "model.path=Qwen/Qwen3-8B", "model.lora_rank=8"]) == 0
    trainer = yaml.safe_load(capsys.readouterr().out)["trainer"]
    assert trainer["experiment_name"] == "sft-Qwen3-8B-gsm8k-lora8"
    assert trainer["default_local_dir"] == "checkpoints/verl/sft-Qwen3-8B-gsm8k-lora8"


@pytest.mark.parametrize("name", list(V09_FSDP_SCRIPTS))
def test_upstream_fsdp_script_is_accepted_and_keeps_every_key(name, capsys) -> None:
    argv = V09_FSDP_SCRIPTS[name]
    assert sft_trainer.main([*argv, "--cfg", "job"]) == 0, capsys.readouterr().err
    printed = yaml.safe_load(capsys.readouterr().out)
    groups = [a for a in argv if a.split("=", 1)[0] in ("engine", "optim", "model")]
    assert all(g.endswith("=fsdp") for g in groups)  # the FSDP groups: what sft_trainer_engine is composed of
    cfg = load_config([a for a in argv if a not in groups], config_name="sft_trainer_engine", schema=SFTEngineConfig)
    sft = to_sft_overrides(cfg)
    for arg in argv:
        if arg in groups:
            continue
        key, text = arg.split("=", 1)
        want = yaml.safe_load(text)
        got = (
            OmegaConf.to_container(OmegaConf.select(cfg, key))
            if key.endswith(("logger", "betas", "contents"))
            else (OmegaConf.select(cfg, key))
        )
        want = [want] if key == "trainer.logger" and isinstance(want, str) else want
        assert _same(got, want), (key, got, want)
        node = printed
        for part in key.split("."):
            node = node[part]
        assert _same(node, want), key
    # where the keys take effect in the one SFT trainer
    assert sft["trainer.default_local_dir"] == cfg.trainer.default_local_dir
    assert sft["optim.lr"] == cfg.optim.lr and sft["data.train_batch_size"] == cfg.data.train_batch_size
    assert sft["trainer.total_epochs"] == cfg.trainer.total_epochs
    assert sft["trainer.total_training_steps"] == cfg.trainer.total_training_steps
    assert sft["model.lora_rank"] == cfg.model.lora_rank and sft["data.messages_key"] == "messages"


def test_translation_of_the_keys_that_move() -> None:
    cfg = load_config(
        [
            "data.train_files=~/data/t.parquet",
            "optim.warmup_style=cosine",
            "optim.lr_scheduler_type=constant",
            "optim.lr_warmup_steps=-1",
            "data.truncation=left",
            "engine.seed=7",
            "trainer.seed=3",
            "engine.dtype=float16",
            "checkpoint.save_contents=[model,optimizer,extra,hf_model]",
            "model.use_fused_kernels=true",
            "optim.optimizer=SGD",
            "optim.zero_indexed_step=false",
            "optim.override_optimizer_config={momentum: 0.9}",
        ],
        config_name="sft_trainer_engine",
        schema=SFTEngineConfig,
    )
    sft = to_sft_overrides(cfg)
    assert sft["data.train_files"] == os.path.expanduser("~/data/t.parquet")
    assert sft["optim.lr_scheduler_type"] == "cosine" and sft["optim.warmup_style"] is None  # the old name wins
    assert sft["optim.lr_warmup_steps"] == 0  # -1: lr_warmup_steps_ratio decides, as upstream
    assert sft["data.truncation"] == "right"  # upstream's no_padding layout cuts at the right even for left
    assert sft["trainer.seed"] == 7 and sft["data.seed"] == 3  # engine.seed: torch; trainer.seed: data order
    assert sft["model.dtype"] == "float16" and sft["trainer.export_hf"] is True
    assert sft["data.use_dynamic_bsz"] is True and sft["data.max_token_len_per_gpu"] == 8192  # upstream's default
    assert sft["model.use_fused_kernels"] is True  # the chunked LM head of sft_trainer.yaml
    assert (sft["optim.optimizer"], sft["optim.optimizer_impl"]) == ("SGD", "torch.optim")  # verl/utils/optim.py
    assert sft["optim.override_optimizer_config"] == {"momentum": 0.9} and sft["optim.zero_indexed_step"] is False
    padded = load_config(["data.truncation=left", "data.pad_mode=right"], "sft_trainer_engine", schema=SFTEngineConfig)
    assert to_sft_overrides(padded)["data.truncation"] == "left"
    assert to_sft_overrides(padded)["trainer.export_hf"] is False  # upstream saves no HF model unless asked


def test_use_liger_runs_the_loss_through_the_chunked_head() -> None:
    def fused(*args: str) -> bool:
        argv = ["data.train_files=t.parquet", *args]
        cfg = load_config(argv, config_name="sft_trainer_engine", schema=SFTEngineConfig)
        return to_sft_overrides(cfg)["model.use_fused_kernels"]

    assert fused() is False and fused("model.use_liger=true") is True


@pytest.mark.parametrize("size", [-1, 1, 16])
def test_fsdp_size_is_accepted_and_reaches_the_trainer(size) -> None:
    """Upstream recipes set engine.fsdp_size=1 on 1 GPU and 16 on 8 GPUs (both: all ranks, as -1); the value becomes
    the trainer's model.fsdp_size, checked against the world size at launch."""
    cfg = load_config([f"engine.fsdp_size={size}"], config_name="sft_trainer_engine", schema=SFTEngineConfig)
    assert to_sft_overrides(cfg)["model.fsdp_size"] == size


def test_fsdp_size_against_the_world_size() -> None:
    """Upstream's create_device_mesh: -1 or the world size and more shard over all ranks, a divisor is HSDP; another
    size stops the launch in one line naming the key, the value and the world size."""
    from verl.trainer.config.sft_engine_checks import check_world
    from verl.trainer.config.validation import ConfigError

    def cfg(size: int):
        return load_config([f"engine.fsdp_size={size}"], config_name="sft_trainer_engine", schema=SFTEngineConfig)

    for size, world in ((-1, 8), (16, 8), (8, 8), (2, 8), (1, 2), (1, None), (4, None)):
        check_world(cfg(size), world)
    with pytest.raises(ConfigError, match=r"engine\.fsdp_size=3 does not divide the world size 4"):
        check_world(cfg(3), 4)


@pytest.mark.parametrize(
    "override, message",
    [
        ("engine=megatron", "the Megatron-LM engine is not available here"),
        ("optim=megatron", "use engine=fsdp optim=fsdp"),
        ("engine=automodel", "the NeMo Automodel engine is not available here"),
        ("engine@engine=veomni", "the VeOmni engine is not available here"),
        ("engine.param_offload=true", "CPU offload is not available for SFT"),
        ("engine.fsdp_size=0", "engine.fsdp_size=0: must be -1 (shard over all ranks) or a group size >= 1"),
        ("engine.strategy=fsdp_turbo", "FSDP Turbo is not an engine here"),
        ("model.lora.rank=8", "use model.lora_rank"),
        ("model.mtp.enable=true", "multi-token prediction"),
        ("model.fused_kernel_options.impl_backend=cuda", "expected torch or triton"),
        ("optim.total_training_steps=10", "set trainer.total_training_steps instead"),
        ("data.train_max_samples=10", "write a smaller file instead"),
        ("data.custom_cls.path=my.py", "custom dataset classes"),
        ("profiler.enable=true", "no profiler"),
        ("checkpoint.save_contents=[model]", "always hold model, optimizer and extra"),
        ("trainer.device=npu", "Ascend NPU is not a device here"),
        ("data.messages_kye=m", "data.messages_kye: unknown key; did you mean data.messages_key?"),
    ],
)
def test_unsupported_settings_are_refused_in_one_line(override, message, capsys) -> None:
    assert sft_trainer.main([override, "--cfg", "job"]) == 2
    err = capsys.readouterr().err
    assert "invalid config (1 problem)" in err and message in err  # one line, naming the key and what to do


def test_remote_code_needs_the_switch_only_where_the_model_has_code(
    model_dir_with_code, tiny_model_dir, capsys
) -> None:
    assert sft_trainer.main([f"model.path={model_dir_with_code}", "model.trust_remote_code=true", "--cfg", "job"]) == 2
    assert "model.trust_remote_code=true runs Python files" in capsys.readouterr().err
    assert sft_trainer.main([f"model.path={tiny_model_dir}", "model.trust_remote_code=true", "--cfg", "job"]) == 0


def test_dynamic_micro_batches_respect_the_token_budget() -> None:
    from verl.trainer.offline.sft import SFTTrainer

    items = [{"input_ids": [0] * n} for n in (6, 5, 4, 3, 9)]
    fake = SimpleNamespace(
        config=OmegaConf.create({"data": {"use_dynamic_bsz": True, "max_token_len_per_gpu": 10}}),
        _collate=lambda rows, ds: [len(r["input_ids"]) for r in rows],
    )
    groups = SFTTrainer._micro_batches(fake, items, None)
    assert sorted(n for g in groups for n in g) == [3, 4, 5, 6, 9]  # every row once
    assert all(sum(g) <= 10 for g in groups) and len(groups) == 3


def test_short_run_follows_total_epochs_and_after_each_epoch(tiny_model_dir, tmp_path, monkeypatch) -> None:
    """Two epochs of 3 conversations at 2 per step: 2 steps (the last partial batch is dropped, as upstream's
    loader does), an evaluation after each epoch, a checkpoint at the end (the reports drawn at each checkpoint take
    most of the time, so there is one). ``VERL_FILE_LOGGER_PATH`` gets upstream's file with upstream's names."""
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "upstream" / "golden.jsonl"))
    rows = [
        {"messages": [{"role": "user", "content": f"{i} + {i}?"}, {"role": "assistant", "content": f"{2 * i}"}]}
        for i in range(3)
    ]
    train, val = str(tmp_path / "train.parquet"), str(tmp_path / "test.parquet")
    pd.DataFrame(rows).to_parquet(train)
    pd.DataFrame(rows[:1]).to_parquet(val)
    out = str(tmp_path / "out")
    argv = [
        f"data.train_files={train}",
        f"data.val_files={val}",
        "data.messages_key=messages",
        "data.train_batch_size=2",
        "data.max_token_len_per_gpu=64",
        "engine=fsdp",
        "engine.dtype=float32",
        f"model.path={tiny_model_dir}",
        "model.enable_gradient_checkpointing=false",
        "optim.lr=1e-3",
        "trainer.total_epochs=2",
        "trainer.test_freq=after_each_epoch",
        "trainer.logger=[console,file]",
        "trainer.device=cpu",
        f"trainer.default_local_dir={out}",
    ]
    assert sft_trainer.main(argv) == 0
    assert sorted(d for d in os.listdir(out) if d.startswith("global_step_")) == ["global_step_2"]
    assert not os.path.exists(os.path.join(out, "hf_model"))  # no hf_model in checkpoint.save_contents
    with open(os.path.join(out, "logs", "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    assert max(r["step"] for r in records) == 2
    assert {r["step"] for r in records if "eval/loss" in r["metrics"]} == {1, 2}
    # upstream's compare script reads data["train/loss"] and data["train/grad_norm"] of its file
    with open(tmp_path / "upstream" / "golden.jsonl") as f:
        upstream = [json.loads(line) for line in f if line.strip()]
    train = [r for r in upstream if "train/loss" in r["data"]]
    assert [r["step"] for r in train] == [1, 2] and all("train/grad_norm" in r["data"] for r in train)
    assert train[0]["data"]["train/loss"] == next(r["metrics"]["loss"] for r in records if "loss" in r["metrics"])
    assert {r["step"] for r in upstream if "val/loss" in r["data"]} == {1, 2}


def test_upstream_config_name_resolves(tmp_path, capsys) -> None:
    """Scripts that name the config (``--config-name sft_trainer_engine``, with or without a ``--config-path`` of
    their own that lacks the file) get the packaged v0.9 config."""
    for extra in ([], ["--config-path", str(tmp_path)]):
        argv = [*extra, "--config-name", "sft_trainer_engine", "optim.lr=2e-5", "--cfg", "job"]
        assert sft_trainer.main(argv) == 0
        assert yaml.safe_load(capsys.readouterr().out)["optim"]["lr"] == 2e-5


@pytest.mark.slow
def test_two_rank_torchrun_with_dynamic_micro_batches(tiny_model_dir, tmp_path) -> None:
    """torchrun with 2 ranks: token-budget micro-batches agree across ranks, 9 rows at 4 per step are 2 steps an
    epoch (upstream's loader drops the last partial batch), and the 3-row evaluation set is scored after each step."""
    import socket
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    rows = [
        {"messages": [{"role": "user", "content": "q" * (3 + 7 * i)}, {"role": "assistant", "content": "a" * (2 + i)}]}
        for i in range(9)
    ]
    pd.DataFrame(rows).to_parquet(tmp_path / "train.parquet")
    pd.DataFrame(rows[:3]).to_parquet(tmp_path / "test.parquet")
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT")}
    env.update(PYTHONPATH=root, OMP_NUM_THREADS="1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [
        f"data.train_files={tmp_path}/train.parquet",
        f"data.val_files={tmp_path}/test.parquet",
        "data.train_batch_size=4",
        "data.max_token_len_per_gpu=120",
        "engine.dtype=float32",
        f"model.path={tiny_model_dir}",
        "model.enable_gradient_checkpointing=false",
        "trainer.total_epochs=2",
        "trainer.test_freq=1",
        "trainer.logger=[file]",
        "trainer.device=cpu",
        f"trainer.default_local_dir={tmp_path}/out",
    ]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}"]
    run = subprocess.run(
        [*launcher, "-m", "verl.trainer.sft_trainer", *argv], env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-3000:]
    with open(tmp_path / "out" / "logs" / "metrics.jsonl") as f:
        records = [json.loads(line) for line in f if line.strip()]
    assert {r["step"] for r in records if "eval/loss" in r["metrics"]} == {1, 2, 3, 4}
    assert os.path.isdir(tmp_path / "out" / "global_step_4")
