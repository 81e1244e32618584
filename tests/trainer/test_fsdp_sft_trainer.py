"""``python -m verl.trainer.fsdp_sft_trainer``: verl's SFT keys accepted, mapped onto the one SFT trainer, and run
(dict-keyed columns, LoRA with a merged export and exact resume, multi-turn messages, a verl-style script)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from verl.trainer import fsdp_sft_trainer
from verl.trainer.config.fsdp_sft_schema import FSDPSFTConfig, to_sft_overrides
from verl.trainer.config.loader import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAST = ["trainer.device=cpu", "trainer.logger=[file]", "optim.lr=1e-2", "optim.lr_scheduler=constant"]


def _gsm8k_like(path: str, n: int = 4) -> str:
    """Rows shaped like verl's gsm8k preprocessing: the text lives in the extra_info dict."""
    rows = [{"extra_info": {"question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"}} for i in range(n)]
    pd.DataFrame(rows).to_parquet(path)
    return path


def _args(tmp_path, model: str, data: str, *extra: str) -> list[str]:
    return [
        f"data.train_files={data}",
        "data.prompt_key=extra_info",
        "data.response_key=extra_info",
        "data.prompt_dict_keys=[question]",
        "+data.response_dict_keys=[answer]",  # verl's older scripts add it with '+'
        "data.train_batch_size=2",
        "data.micro_batch_size_per_gpu=1",
        f"model.partial_pretrain={model}",
        f"trainer.default_local_dir={tmp_path}/out",
        "trainer.total_epochs=1",
        *FAST,
        *extra,
    ]


def test_yaml_defaults_match_the_schema() -> None:
    cfg = load_config([], config_name="fsdp_sft_trainer", schema=FSDPSFTConfig)
    assert OmegaConf.to_container(cfg, resolve=True) == dataclasses.asdict(FSDPSFTConfig())


def test_cfg_job_accepts_verl_keys_and_maps_them(capsys) -> None:
    argv = [
        "--cfg",
        "job",
        "data.train_files=t.parquet",
        "model.partial_pretrain=m",
        "data.micro_batch_size=3",
        "optim.warmup_steps_ratio=0.2",
        "trainer.resume_path=/ckpt/global_step_4",
        "data.multiturn.enable=true",
        "model.lora_rank=8",
    ]
    assert fsdp_sft_trainer.main(argv) == 0
    captured = capsys.readouterr()
    assert "partial_pretrain: m" in captured.out and "lora_rank: 8" in captured.out
    assert "micro_batch_size is deprecated" in captured.err
    cfg = load_config(argv[2:], config_name="fsdp_sft_trainer", schema=FSDPSFTConfig)
    sft = to_sft_overrides(cfg)
    assert sft["model.path"] == "m" and sft["data.micro_batch_size_per_gpu"] == 3
    assert sft["optim.lr_warmup_steps_ratio"] == 0.2 and sft["optim.warmup_style"] == "cosine"
    assert sft["trainer.resume_mode"] == "resume_path" and sft["trainer.resume_from_path"] == "/ckpt/global_step_4"
    assert sft["data.messages_key"] == "messages" and sft["data.apply_chat_template"] is True
    # the experiment name is derived from what the run trains: sft-<model>-<data>-lora<r>
    assert sft["trainer.default_local_dir"] == "checkpoints/verl/sft-m-t-lora8"
    assert sft["model.use_fused_kernels"] is False
    liger = load_config([*argv[2:], "model.use_liger=true"], config_name="fsdp_sft_trainer", schema=FSDPSFTConfig)
    assert to_sft_overrides(liger)["model.use_fused_kernels"] is True  # Liger's loss kernel: the chunked LM head


@pytest.mark.parametrize(
    "override, message",
    [
        ("ulysses_sequence_parallel_size=0", "ulysses_sequence_parallel_size: must be >= 1"),
        ("model.fsdp_config.model_dtype=bf16", "only fp32 master weights"),
        ("optim.lr_scheduler=wsd", "wsd is not available"),
        ("trainer.default_hdfs_dir=hdfs://x", "not copied to HDFS"),
        ("trainer.checkpoint.save_contents=[model]", "always hold model, optimizer and extra"),
        ("data.custom_cls.path=my.py", "custom dataset classes"),
        ("data.lr=1", "data.lr: unknown key"),
    ],
)
def test_unsupported_settings_are_refused_with_the_reason(override, message, capsys) -> None:
    assert fsdp_sft_trainer.main(["--cfg", "job", override]) == 2
    assert message in capsys.readouterr().err


def test_a_checkpoint_with_hf_model_is_accepted(capsys) -> None:
    """verl's CI saves ``[model,optimizer,extra,hf_model]``: the Hugging Face form is the export written at the end."""
    argv = ["--cfg", "job", "trainer.checkpoint.save_contents=[model,optimizer,extra,hf_model]"]
    assert fsdp_sft_trainer.main(argv) == 0
    argv = ["--cfg", "job", "trainer.checkpoint.load_contents=[model,optimizer,extra,hf_model]"]
    assert fsdp_sft_trainer.main(argv) == 2
    assert "always hold model, optimizer and extra" in capsys.readouterr().err


def test_kernel_and_sequence_parallel_keys_of_verl_scripts_are_accepted(capsys) -> None:
    """verl's sp2 / liger scripts: the same loss here (the token mean over the global batch), a warning for SP."""
    argv = ["--cfg", "job", "model.use_liger=True", "ulysses_sequence_parallel_size=2", "use_remove_padding=true"]
    assert fsdp_sft_trainer.main(argv) == 0
    assert "sequences are not split across ranks" in capsys.readouterr().err


def test_more_ranks_than_the_launcher_gave_is_refused(tmp_path, capsys, monkeypatch) -> None:
    # not launched by torchrun (an in-process vLLM engine earlier in the run may have left WORLD_SIZE=1 behind)
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    argv = ["data.train_files=x.parquet", "model.partial_pretrain=m", "trainer.n_gpus_per_node=8"]
    assert fsdp_sft_trainer.main(argv) == 2
    assert "torchrun --nnodes=1 --nproc_per_node=8 -m verl.trainer.fsdp_sft_trainer" in capsys.readouterr().err


def test_lora_sft_on_dict_keyed_rows_exports_a_merged_model(tiny_model_dir, tmp_path) -> None:
    from transformers import AutoModelForCausalLM

    data = _gsm8k_like(os.path.join(str(tmp_path), "train.parquet"))
    argv = _args(tmp_path, tiny_model_dir, data, "model.lora_rank=4", "model.lora_alpha=8", "trainer.save_freq=1")
    assert fsdp_sft_trainer.main(argv) == 0
    out = os.path.join(str(tmp_path), "out")
    # checkpoints hold the adapter only; the export is a plain transformers model with the adapters merged in
    assert os.path.isfile(os.path.join(out, "global_step_2", "actor", "lora_adapter", "adapter_model.safetensors"))
    exported = AutoModelForCausalLM.from_pretrained(os.path.join(out, "hf_model"))
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    changed = [n for n, p in exported.state_dict().items() if not torch.equal(p, base.state_dict()[n])]
    assert changed and all("proj" in n for n in changed)  # only LoRA-targeted linear layers moved
    assert not any("lora" in n for n in exported.state_dict())

    # the run can be continued: the adapter and optimizer come back and training goes on from step 2
    argv2 = [a for a in argv if not a.startswith("trainer.total_epochs")] + ["trainer.total_epochs=2"]
    assert fsdp_sft_trainer.main(argv2) == 0
    assert os.path.isdir(os.path.join(out, "global_step_4"))
    with open(os.path.join(out, "logs", "metrics.jsonl")) as f:
        steps = [json.loads(line)["step"] for line in f if line.strip()]
    assert steps[-1] == 4 and 3 in steps


def test_multiturn_messages_rows(tiny_model_dir, tmp_path) -> None:
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"hi {i}"},
                {"role": "assistant", "content": f"hello {i}"},
                {"role": "user", "content": "and?"},
                {"role": "assistant", "content": "bye"},
            ]
        }
        for i in range(4)
    ]
    data = os.path.join(str(tmp_path), "chat.parquet")
    pd.DataFrame(rows).to_parquet(data)
    argv = [
        f"data.train_files={data}",
        "data.multiturn.enable=true",
        "data.train_batch_size=2",
        "data.micro_batch_size_per_gpu=2",
        f"model.partial_pretrain={tiny_model_dir}",
        f"trainer.default_local_dir={tmp_path}/out",
        "trainer.total_epochs=1",
        *FAST,
    ]
    assert fsdp_sft_trainer.main(argv) == 0
    assert os.path.isfile(os.path.join(str(tmp_path), "out", "hf_model", "config.json"))
    # rows with tool schemas would be trained without them: refused, naming the row
    rows[1]["tools"] = [{"name": "calc"}]
    pd.DataFrame(rows).to_parquet(data)
    assert fsdp_sft_trainer.main(argv) == 2


def test_verl_style_script_runs_without_torchrun(tiny_model_dir, tmp_path) -> None:
    data = os.path.join(str(tmp_path), "data")
    prep = os.path.join(ROOT, "examples", "data_preprocess", "arithmetic_offline.py")
    subprocess.run([sys.executable, prep, "--local_dir", data, "--train_size", "4", "--test_size", "2"], check=True)
    script = os.path.join(ROOT, "examples", "sft_trainer", "run_arithmetic_sft_verl_style.sh")
    env = dict(
        os.environ,
        PYTHON=sys.executable,
        DATA=data,
        MODEL=tiny_model_dir,
        SAVE_DIR=os.path.join(str(tmp_path), "out"),
        PYTHONPATH=ROOT,
    )
    extra = ["data.train_batch_size=2", "data.micro_batch_size_per_gpu=2", "trainer.device=cpu"]
    result = subprocess.run(
        ["bash", script, *extra], env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert os.path.isfile(os.path.join(str(tmp_path), "out", "hf_model", "config.json"))


@pytest.mark.slow
def test_two_rank_torchrun_saves_shards_and_resumes_on_one_rank(tiny_model_dir, tmp_path) -> None:
    """torchrun with 2 ranks: each rank writes its own model and optimizer shards; the run continues on 1 rank."""
    import socket

    data = _gsm8k_like(os.path.join(str(tmp_path), "train.parquet"), n=8)
    args = _args(tmp_path, tiny_model_dir, data, "trainer.save_freq=1")
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT")}
    env.update(PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}"]
    two = subprocess.run(
        [*launcher, "-m", "verl.trainer.fsdp_sft_trainer", *args, "trainer.n_gpus_per_node=2"]
        + ["trainer.total_training_steps=2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    role_dir = os.path.join(str(tmp_path), "out", "global_step_2", "actor")
    for kind in ("model", "optim"):
        for rank in range(2):
            assert os.path.isfile(os.path.join(role_dir, f"{kind}_world_size_2_rank_{rank}.safetensors"))
    one = subprocess.run(
        [sys.executable, "-m", "verl.trainer.fsdp_sft_trainer", *args, "trainer.total_training_steps=3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert one.returncode == 0, one.stderr[-3000:]
    assert f"resumed from {os.path.dirname(role_dir)} at step 2" in one.stdout
    assert os.path.isfile(
        os.path.join(str(tmp_path), "out", "global_step_3", "actor", "model_world_size_1_rank_0.safetensors")
    )
