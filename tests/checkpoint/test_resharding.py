"""Sharded checkpoints across world sizes: FSDP2 over 4 gloo ranks saves each rank's own block of the weights and
of the Adam state; loading onto 4 ranks continues bit-exactly, onto 2, 3 (uneven blocks), 1 rank and a 2x2 HSDP
mesh restores exactly the saved weights and optimizer state, and the merger rebuilds the full model."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

pytestmark = pytest.mark.slow

SAVED_WORLD = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model_and_optimizer(fsdp_size: int = -1):
    from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm
    from verl.utils import fsdp_utils

    # qwen2 with tied embeddings: an aliased weight; vocab 259 and hidden 64 split unevenly over 3 and 4 ranks
    model = make_tiny_causal_lm(TinyModelSpec(arch="qwen2", tie_word_embeddings=True), seed=0)
    if dist.is_initialized():
        fsdp_utils.apply_fsdp2(model, mesh=fsdp_utils.fsdp_mesh("cpu", fsdp_size))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1 + s))
    return model, optimizer, scheduler


def _train_step(model, optimizer, scheduler, step: int) -> None:
    # every rank sees its own rows of one fixed global batch of 4
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    gen = torch.Generator().manual_seed(100 + step)
    ids = torch.randint(3, 250, (4, 12), generator=gen)
    rows = ids[rank * 4 // world : (rank + 1) * 4 // world]
    loss = model(input_ids=rows, labels=rows).loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()


def _clone(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(_clone(v) for v in obj)
    return obj


def _full_states(model, optimizer) -> tuple[dict, dict]:
    """Gathered weights and optimizer state, copied (the optimizer's ``step`` tensors are updated in place)."""
    from verl.utils import fsdp_utils

    full = fsdp_utils.get_full_model_state_dict(model), fsdp_utils.get_full_optimizer_state_dict(model, optimizer)
    return _clone(full)


def _run(rank: int, world: int, port: int, phase: str, ckpt: str, out: str, fsdp_size: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        from verl.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

        model, optimizer, scheduler = _model_and_optimizer(fsdp_size)
        manager = FSDPCheckpointManager(model, optimizer, scheduler)
        if phase == "save":
            _train_step(model, optimizer, scheduler, 0)
            manager.save_checkpoint(ckpt, global_step=1)
            saved = _full_states(model, optimizer)
            _train_step(model, optimizer, scheduler, 1)
            result = {"saved": saved, "continued": _full_states(model, optimizer)[0]}
        else:
            torch.manual_seed(1234)  # whatever the RNG holds, the checkpoint's states come back
            extra = manager.load_checkpoint(ckpt)
            result = {"loaded": _full_states(model, optimizer), "extra": extra}
            if phase == "continue":
                _train_step(model, optimizer, scheduler, 1)
                result["continued"] = _full_states(model, optimizer)[0]
        if rank == 0:
            torch.save(result, out)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    # The work is done and checked by the parent: leave without the interpreter's teardown, where a native thread
    # of the gloo/oneDNN runtime now and then aborts the process ("terminate called without an active exception",
    # exit -6) after everything above succeeded. An exception above still fails the rank (it never gets here).
    os._exit(0)


def _launch(world: int, phase: str, ckpt: str, out: str, fsdp_size: int = -1) -> dict:
    port = _free_port()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_run, args=(r, world, port, phase, ckpt, out, fsdp_size)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    codes = [p.exitcode for p in procs]
    assert codes == [0] * world, f"{phase} on {world} ranks: exit codes {codes}"
    return torch.load(out, weights_only=False)


def _assert_same(got: dict, want: dict, what: str) -> None:
    assert set(got) == set(want), f"{what}: keys differ"
    for key, value in want.items():
        if isinstance(value, dict):
            _assert_same(got[key], value, f"{what}.{key}")
        elif isinstance(value, torch.Tensor):
            assert torch.equal(got[key], value), f"{what}.{key} differs (max {float((got[key] - value).abs().max())})"
        else:
            assert got[key] == value, f"{what}.{key}: {got[key]!r} != {value!r}"


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[str, dict]:
    root = tmp_path_factory.mktemp("reshard")
    ckpt = str(root / "global_step_1" / "actor")
    return ckpt, _launch(SAVED_WORLD, "save", ckpt, str(root / "save.pt"))


def test_every_rank_writes_its_own_shards(saved) -> None:
    from verl.checkpoint.sharded_state import ShardReader

    ckpt, _ = saved
    files = sorted(os.listdir(ckpt))
    for kind in ("model", "optim"):
        assert [f for f in files if f.startswith(f"{kind}_")] == [
            f"{kind}_world_size_4_rank_{r}.safetensors" for r in range(SAVED_WORLD)
        ]
    reader = ShardReader(ckpt, "model")
    # the vocab rows are split 65/65/65/64 over the ranks, and the tied lm_head is stored once, as an alias
    pieces = reader.entries["model.embed_tokens.weight"].pieces
    assert [p.shape[0] for p in pieces] == [65, 65, 65, 64]
    assert reader.aliases.get("lm_head.weight") == "model.embed_tokens.weight"


def test_same_world_size_resumes_bit_exactly(saved, tmp_path) -> None:
    ckpt, ref = saved
    got = _launch(SAVED_WORLD, "continue", ckpt, str(tmp_path / "out.pt"))
    _assert_same(got["loaded"][0], ref["saved"][0], "weights")
    _assert_same(got["loaded"][1], ref["saved"][1], "optimizer")
    assert got["extra"] == {"global_step": 1}
    _assert_same(got["continued"], ref["continued"], "weights after the next step")


@pytest.mark.parametrize("world,fsdp_size", [(2, -1), (3, -1), (1, -1), (4, 2)], ids=["2", "3", "1", "hsdp-2x2"])
def test_other_world_sizes_restore_the_saved_state(saved, tmp_path, world: int, fsdp_size: int) -> None:
    ckpt, ref = saved
    got = _launch(world, "load", ckpt, str(tmp_path / "out.pt"), fsdp_size=fsdp_size)
    _assert_same(got["loaded"][0], ref["saved"][0], "weights")
    _assert_same(got["loaded"][1], ref["saved"][1], "optimizer")


def test_merger_rebuilds_the_full_model(saved, tmp_path) -> None:
    from transformers import AutoModelForCausalLM

    from verl.model_merger import merge_checkpoint

    ckpt, ref = saved
    # rank 0 saved the config (not the weights) for the merger
    assert os.listdir(os.path.join(ckpt, "huggingface")) == ["config.json", "generation_config.json"]
    merged = merge_checkpoint(ckpt, str(tmp_path / "hf"))
    model = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32)
    state = model.state_dict()
    for key, value in ref["saved"][0].items():
        assert torch.equal(state[key], value), key
