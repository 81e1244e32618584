"""``model.fsdp_size`` of the offline trainers (``engine.fsdp_size`` of upstream's v0.9 SFT): hybrid sharding over 2
gloo ranks (fsdp_size=1: 2 groups of 1) trains the same losses and weights as FSDP over all ranks, its checkpoints
resume on the 2-D mesh and on plain FSDP, the DPO reference is sharded the same way, and a size that does not divide the
world size stops the trainer before anything loads."""

from __future__ import annotations

import json
import math
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from verl.trainer.config import ConfigError

WORLD = 2
ROWS = [{"prompt": f"Q{i}: {i}+{i}=", "response": f"{2 * i}" * (1 + i % 3)} for i in range(8)]
PAIRS = [{"prompt": f"Q{i}: 1+{i}=", "chosen": f"{1 + i}.", "rejected": f"no{i}!"} for i in range(4)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _losses(out_dir: str) -> dict[int, float]:
    with open(os.path.join(out_dir, "logs", "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return {r["step"]: r["metrics"]["loss"] for r in records if "loss" in r["metrics"]}


def _run(rank: int, port: int, model_dir: str, root: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(WORLD),
        OMP_NUM_THREADS="1",
    )
    torch.set_num_threads(1)
    try:
        from verl.trainer.offline import DPOTrainer, SFTTrainer
        from verl.utils.fsdp_utils import get_full_model_state_dict

        def config(fsdp_size: int, steps: int, name: str) -> dict:
            return {
                "model.dtype": "float32",
                "model.fsdp_size": fsdp_size,
                "data.train_batch_size": 4,
                "data.micro_batch_size_per_gpu": 2,
                "optim.lr": 1e-2,
                "trainer.total_training_steps": steps,
                "trainer.logger": ["file"],
                "trainer.device": "cpu",
                "trainer.export_hf": False,
                "trainer.plot": False,
                "trainer.report.enable": False,
                "trainer.default_local_dir": os.path.join(root, name),
            }

        result: dict = {}
        plain = SFTTrainer(model=model_dir, dataset=ROWS, config=config(-1, 3, "fsdp"))
        assert plain.fsdp_mesh is None
        plain.fit()
        result["fsdp_weights"] = get_full_model_state_dict(plain.model)

        hsdp = SFTTrainer(model=model_dir, dataset=ROWS, config=config(1, 1, "hsdp"))
        mesh = hsdp.fsdp_mesh
        result["mesh"] = (tuple(mesh.shape), tuple(mesh.mesh_dim_names))
        weight = next(p for p in hsdp.model.parameters() if p.ndim == 2)
        result["placements"] = [type(p).__name__ for p in weight.placements]
        hsdp.fit()  # saves global_step_1 from the 2-D mesh

        resumed = SFTTrainer(model=model_dir, dataset=ROWS, config=config(1, 2, "hsdp"))
        resumed.fit()  # loads global_step_1 onto the 2-D mesh, trains step 2
        result["resumed_from"] = resumed.resumed_from

        back = SFTTrainer(model=model_dir, dataset=ROWS, config=config(-1, 3, "hsdp"))
        back.fit()  # loads the HSDP-saved global_step_2 onto plain FSDP, trains step 3
        result["back_from"] = back.resumed_from
        result["hsdp_weights"] = get_full_model_state_dict(back.model)

        dpo_cfg = config(1, 1, "dpo")
        dpo = DPOTrainer(model=model_dir, dataset=PAIRS, config=dpo_cfg)
        result["dpo_ref_mesh"] = next(dpo.ref_model.parameters()).device_mesh.ndim
        result["dpo_loss"] = dpo.fit()["loss"]
        if rank == 0:
            torch.save(result, os.path.join(root, "result.pt"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    os._exit(0)  # as tests/checkpoint/test_resharding.py: skip the gloo runtime's occasional abort at teardown


@pytest.mark.slow
def test_hybrid_sharding_trains_saves_and_resumes_as_fsdp(tiny_model_dir, tmp_path) -> None:
    port = _free_port()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_run, args=(r, port, tiny_model_dir, str(tmp_path))) for r in range(WORLD)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * WORLD
    result = torch.load(tmp_path / "result.pt", weights_only=False)

    assert result["mesh"] == ((2, 1), ("ddp", "fsdp"))  # 2 groups of 1 rank: replicated, not split
    assert result["placements"] == ["Replicate", "Shard"]
    fsdp, hsdp = _losses(str(tmp_path / "fsdp")), _losses(str(tmp_path / "hsdp"))
    assert set(fsdp) == set(hsdp) == {1, 2, 3}
    # step 2 follows a save and a resume on the 2-D mesh; step 3 a save there and a resume on plain FSDP
    for step in (1, 2, 3):
        assert hsdp[step] == pytest.approx(fsdp[step], rel=1e-5, abs=1e-6)
    assert fsdp[2] != pytest.approx(fsdp[1], rel=1e-3)  # the first step changed the model
    assert result["resumed_from"].endswith("global_step_1") and result["back_from"].endswith("global_step_2")
    role = tmp_path / "hsdp" / "global_step_2" / "actor"  # written from the 2-D mesh
    assert {f"model_world_size_2_rank_{r}.safetensors" for r in range(WORLD)} <= set(os.listdir(role))
    for name, value in result["fsdp_weights"].items():
        torch.testing.assert_close(result["hsdp_weights"][name], value, rtol=1e-5, atol=1e-6, msg=name)

    assert result["dpo_ref_mesh"] == 2  # the reference takes the policy's mesh
    assert result["dpo_loss"] == pytest.approx(math.log(2), rel=1e-5)  # policy == reference at step 1


def test_a_size_that_does_not_divide_the_world_stops_the_trainer(tiny_model_dir, monkeypatch) -> None:
    """A world of 4 (as torchrun would give) and model.fsdp_size=3: one line naming the key, the value and the
    world size, raised before the tokenizer or the model loads."""
    from verl.trainer.offline import SFTTrainer, base

    monkeypatch.setattr(base, "init_distributed_if_needed", lambda device: True)
    monkeypatch.setattr(base.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(base.dist, "get_world_size", lambda: 4)
    monkeypatch.setattr(base.dist, "get_rank", lambda: 0)
    monkeypatch.setattr(SFTTrainer, "_load_tokenizer", lambda self, model: pytest.fail("the tokenizer loaded"))
    with pytest.raises(ConfigError, match=r"model\.fsdp_size=3 does not divide the world size 4"):
        SFTTrainer(model=tiny_model_dir, dataset=ROWS, config={"model.fsdp_size": 3, "trainer.device": "cpu"})
