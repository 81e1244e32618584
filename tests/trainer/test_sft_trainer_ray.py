"""``python -m verl.trainer.sft_trainer_ray``: v0.9's driver-launched SFT. One rank trains in the driver; the ranks
of one node are started by the driver (the same trainer as a torchrun launch); the ranks of several nodes are Ray
actors."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from verl.trainer import sft_trainer_ray


def _data(tmp_path) -> list[str]:
    rows = [
        {"messages": [{"role": "user", "content": "q" * (3 + 5 * i)}, {"role": "assistant", "content": "a" * (2 + i)}]}
        for i in range(8)
    ]
    pd.DataFrame(rows).to_parquet(tmp_path / "train.parquet")
    return [f"data.train_files={tmp_path}/train.parquet", "data.val_files=null", "data.messages_key=messages"]


@pytest.fixture(autouse=True)
def _not_under_a_launcher(monkeypatch) -> None:
    # an in-process vLLM engine earlier in the suite may have left WORLD_SIZE=1 behind
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.slow
def test_several_nodes_train_as_ray_actors(tiny_model_dir, tmp_path, monkeypatch) -> None:
    """Two "nodes" of one rank each: two Ray actors (two placement groups) join one gloo group and train; the driver
    process holds no process group, so it could not have trained them itself (its world check would refuse)."""
    import ray
    import torch.distributed as dist

    monkeypatch.setenv("VERL_DEVICE", "cpu")  # in case trainer.device=cpu sets it in this process: undone after
    ray_was_running = ray.is_initialized()
    out = tmp_path / "out"
    argv = [*_data(tmp_path), f"model.path={tiny_model_dir}", "trainer.nnodes=2", "trainer.n_gpus_per_node=1"]
    argv += ["trainer.device=cpu", "data.train_batch_size=4", "data.micro_batch_size_per_gpu=2", "engine.dtype=float32"]
    argv += ["model.enable_gradient_checkpointing=false", "trainer.total_epochs=1", "trainer.logger=[file]"]
    try:
        assert sft_trainer_ray.main([*argv, f"trainer.default_local_dir={out}"]) == 0
    finally:
        if not ray_was_running:
            ray.shutdown()
    assert not dist.is_initialized()
    with open(out / "logs" / "metrics.jsonl") as f:
        steps = [json.loads(line)["step"] for line in f if line.strip()]
    assert max(steps) == 2  # 8 rows at 4 a step
    assert not (out / ".launch").exists()  # not the one-node torchrun path


def test_a_launcher_world_that_disagrees_with_the_config_is_refused(tiny_model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "1")
    argv = [*_data(tmp_path), f"model.path={tiny_model_dir}", "trainer.nnodes=1", "trainer.n_gpus_per_node=4"]
    assert sft_trainer_ray.main([*argv, "trainer.device=cpu"]) == 2
    assert "WORLD_SIZE=1" in capsys.readouterr().err


def test_upstream_ci_call_with_the_fsdp_engine_is_accepted(capsys) -> None:
    argv = ["--cfg", "job", "trainer.nnodes=1", "trainer.n_gpus_per_node=8", "engine=fsdp", "model=hf_model"]
    assert sft_trainer_ray.main(argv) == 0
    assert "n_gpus_per_node: 8" in capsys.readouterr().out


@pytest.mark.slow
def test_two_ranks_started_by_the_driver_train(tiny_model_dir, tmp_path, monkeypatch) -> None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    monkeypatch.setenv("PYTHONPATH", root)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "out"
    argv = [
        *_data(tmp_path),
        f"model.path={tiny_model_dir}",
        "model.enable_gradient_checkpointing=false",
        "engine.dtype=float32",
        "data.train_batch_size=4",
        "data.micro_batch_size_per_gpu=2",
        "trainer.n_gpus_per_node=2",
        "trainer.total_epochs=1",
        "trainer.logger=[file]",
        "trainer.device=cpu",
        f"trainer.default_local_dir={out}",
    ]
    assert sft_trainer_ray.main(argv) == 0
    assert (out / ".launch" / "sft_trainer_engine.yaml").is_file()
    with open(out / "logs" / "metrics.jsonl") as f:
        steps = [json.loads(line)["step"] for line in f if line.strip()]
    assert steps and max(steps) == 2  # 8 rows at 4 a step, over the two ranks
