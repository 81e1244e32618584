"""``model.use_fused_kernels`` under FSDP2 (2 CPU ranks, gloo): the LM head is sharded with the root module, and the
fused head reads it while the root's forward holds it gathered. Log-probs and the update (tied embeddings, entropy
bonus) equal the plain path's on the same sharded model. Ulysses (both ranks one sequence-parallel group): the
fused head on each rank's slice of positions gives the unsplit plain path's log-probs, entropies and gradients."""

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        from tests.workers.actor.test_dp_actor import actor_config, make_data
        from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm
        from verl.utils import fsdp_utils
        from verl.workers.actor.dp_actor import DataParallelPPOActor

        base = make_tiny_causal_lm(TinyModelSpec(arch="qwen2", tie_word_embeddings=True), seed=3)
        data = make_data(bs=8, seed=5).chunk(WORLD)[rank]  # each rank its own rows
        result = {}
        for fused in (False, True):
            model = fsdp_utils.apply_fsdp2(copy.deepcopy(base))
            opt = torch.optim.SGD(model.parameters(), lr=1.0)
            cfg = actor_config(entropy_coeff=0.1, ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=2)
            actor = DataParallelPPOActor(cfg, model, opt, use_fused_kernels=fused)
            lp, ent = actor.compute_log_prob(data, calculate_entropy=True)
            data.batch["old_log_probs"] = lp + 0.05
            metrics = actor.update_policy(data)
            state = fsdp_utils.get_full_model_state_dict(model)
            result[fused] = {"lp": lp, "ent": ent, "state": state, "pg_loss": metrics["actor/pg_loss"]}
        result["initial"] = base.state_dict()
        result["ulysses"] = _ulysses_case(rank)
        torch.save(result, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()
    os._exit(0)  # skip the interpreter teardown where gloo's threads now and then abort (see test_resharding.py)


def _ulysses_case(rank: int) -> dict[str, float]:
    from tests.workers.actor.test_dp_actor import make_data
    from verl.models.tiny import make_tiny_causal_lm
    from verl.utils.ulysses import enable_ulysses_attention
    from verl.workers.actor.response_forward import response_logits_forward, sequence_parallel_response_forward

    micro = make_data(bs=4, seed=7).batch
    valid = micro["response_mask"].bool()
    errors = {}
    for packed in (False, True):
        model = make_tiny_causal_lm(seed=1)
        model.set_attn_implementation("sdpa")
        ref_lp, ref_ent = response_logits_forward(model, micro, 0.7, True, True, packed)
        (ref_lp * valid).sum().add((ref_ent * valid).sum()).backward()
        ref = {n: p.grad.clone() for n, p in model.named_parameters()}
        model.zero_grad()
        enable_ulysses_attention(model)
        lp, ent = sequence_parallel_response_forward(
            model, micro, 0.7, True, True, packed, dist.group.WORLD, 1.0, fused=True
        )
        (lp * valid).sum().add((ent * valid).sum()).backward()
        worst = 0.0
        for name, p in model.named_parameters():
            dist.all_reduce(p.grad)  # each rank holds the gradient of its positions
            worst = max(worst, float((p.grad - ref[name]).abs().max()))
        errors[f"{packed}/lp"] = float(((lp - ref_lp).abs() * valid).max())
        errors[f"{packed}/ent"] = float(((ent - ref_ent).abs() * valid).max())
        errors[f"{packed}/grad"] = worst
    return errors


def test_fused_head_under_fsdp2_equals_plain(tmp_path) -> None:
    out = str(tmp_path / "fsdp")
    port = _free_port()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_run, args=(r, port, out)) for r in range(WORLD)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * WORLD
    for rank in range(WORLD):
        res = torch.load(f"{out}.{rank}", weights_only=False)
        plain, fused = res[False], res[True]
        torch.testing.assert_close(fused["lp"], plain["lp"], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(fused["ent"], plain["ent"], atol=1e-5, rtol=1e-5)
        assert fused["pg_loss"] == plain["pg_loss"] or abs(fused["pg_loss"][0] - plain["pg_loss"][0]) < 1e-5
        if rank == 0:  # the full state dict reaches rank 0
            for name, value in plain["state"].items():
                torch.testing.assert_close(fused["state"][name], value, atol=1e-5, rtol=1e-4, msg=name)
            assert any("embed_tokens" in n for n in plain["state"])
            moved = max(float((plain["state"][n] - v).abs().max()) for n, v in res["initial"].items())
            assert moved > 1e-3, "the update changed nothing"
        assert max(res["ulysses"].values()) < 1e-5, res["ulysses"]
