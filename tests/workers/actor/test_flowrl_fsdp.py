"""FlowRL under FSDP2 (2 CPU ranks, gloo): the log Z head is sharded with the model's root, runs inside the root's
forward while its parameters are gathered, and one update of each rank's half of a batch leaves the same weights,
head included, as one process updating on the whole batch."""

from __future__ import annotations

import copy
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from pytest import mark

pytestmark = mark.slow  # two spawned ranks

WORLD = 2
FLOWRL = {"policy_loss.loss_mode": "flowrl", "policy_loss.flowrl_beta": 2.0, "policy_loss.flowrl_proj_dropout": 0.0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _base_and_data():
    from tests.workers.actor.test_dp_actor import actor_config, make_data
    from verl.models.log_z_head import attach_log_z_head
    from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    base = make_tiny_causal_lm(TinyModelSpec(arch="qwen2", tie_word_embeddings=True), seed=3)
    torch.manual_seed(0)
    attach_log_z_head(base, layers=2, dropout=0.0)
    data = make_data(bs=8, seed=5)
    lp, _ = DataParallelPPOActor(actor_config(), base).compute_log_prob(data)
    gen = torch.Generator().manual_seed(9)
    data.batch["old_log_probs"] = lp + 0.05 * torch.randn(lp.shape, generator=gen)
    data.batch["ref_log_prob"] = lp - 0.1
    return base, data


def _update(module, data, per_rank_rows: int):
    from tests.workers.actor.test_dp_actor import actor_config
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    cfg = actor_config(**FLOWRL, ppo_mini_batch_size=per_rank_rows, ppo_micro_batch_size_per_gpu=2)
    actor = DataParallelPPOActor(cfg, module, torch.optim.SGD(module.parameters(), lr=1.0))
    return actor.update_policy(data)


def _run(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        from verl.utils import fsdp_utils

        base, data = _base_and_data()
        model = fsdp_utils.apply_fsdp2(copy.deepcopy(base))
        metrics = _update(model, data.chunk(WORLD)[rank], per_rank_rows=4)
        state = fsdp_utils.get_full_model_state_dict(model)
        torch.save({"state": state, "log_z": metrics["actor/log_z"]}, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()
    os._exit(0)  # skip the interpreter teardown where gloo's threads now and then abort (see test_resharding.py)


def test_flowrl_update_under_fsdp2_equals_one_process(tmp_path) -> None:
    out = str(tmp_path / "fsdp")
    port = _free_port()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_run, args=(r, port, out)) for r in range(WORLD)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * WORLD
    base, data = _base_and_data()
    single = copy.deepcopy(base)
    _update(single, data, per_rank_rows=8)
    expected = single.state_dict()
    sharded = torch.load(f"{out}.0", weights_only=False)["state"]  # the full state dict reaches rank 0
    assert any(name.startswith("proj_z.") for name in sharded)
    moved = float((expected["proj_z.net.0.weight"] - base.state_dict()["proj_z.net.0.weight"]).abs().max())
    assert moved > 1e-4, "the head did not learn"
    for name, value in expected.items():
        torch.testing.assert_close(sharded[name], value, atol=2e-5, rtol=1e-4, msg=name)
