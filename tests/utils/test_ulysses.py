"""Ulysses sequence parallelism, hybrid sharding and layered weight gathering against the unsplit computation.

Two processes over gloo (CPU). Each case runs inside the spawned ranks and returns its largest deviation, so the
assertions below name what diverged.
"""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

pytestmark = pytest.mark.slow

TEMPERATURE = 0.7
PROMPT, RESPONSE, ROWS = 5, 6, 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _micro_batch():
    from tensordict import TensorDict

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (ROWS, PROMPT + RESPONSE), generator=gen)
    mask = torch.ones(ROWS, PROMPT + RESPONSE, dtype=torch.long)
    mask[0, :2] = 0  # left padding of a short prompt
    mask[1, -3:] = 0  # a short response
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return TensorDict(
        {"input_ids": ids, "attention_mask": mask, "position_ids": positions, "responses": ids[:, PROMPT:]},
        batch_size=[ROWS],
    )


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    model.zero_grad()
    return out


def _sequence_parallel_cases(rank: int) -> dict[str, float]:
    """Actor log-probs/entropies and critic values, padded and packed, eager and sdpa: split vs unsplit."""
    from verl.models.loader import load_value_model
    from verl.models.tiny import make_tiny_causal_lm
    from verl.utils.ulysses import enable_ulysses_attention
    from verl.workers.actor.response_forward import response_logits_forward, sequence_parallel_response_forward
    from verl.workers.critic.dp_critic import response_values_forward, sequence_parallel_values_forward

    group = dist.group.WORLD
    micro = _micro_batch()
    valid = micro["attention_mask"][:, -RESPONSE - 1 : -1].bool() & micro["attention_mask"][:, -RESPONSE:].bool()
    errors: dict[str, float] = {}
    for impl in ("eager", "sdpa"):
        for packed in (False, True):
            tag = f"{impl}/{'packed' if packed else 'padded'}"
            model = make_tiny_causal_lm(seed=1)
            model.set_attn_implementation(impl)
            ref_lp, ref_ent = response_logits_forward(model, micro, TEMPERATURE, True, True, packed)
            (ref_lp * valid).sum().add((ref_ent * valid).sum()).backward()
            ref_grads = _grads(model)
            enable_ulysses_attention(model)
            # outside a sequence-parallel context the wrapped attention is the plain one
            same_lp, _ = response_logits_forward(model, micro, TEMPERATURE, False, False, packed)
            errors[f"{tag}/unsplit-after-enable"] = float(((same_lp - ref_lp).abs() * valid).max())
            lp, ent = sequence_parallel_response_forward(model, micro, TEMPERATURE, True, True, packed, group, 1.0)
            errors[f"{tag}/log_probs"] = float(((lp - ref_lp).abs() * valid).max())
            errors[f"{tag}/entropy"] = float(((ent - ref_ent).abs() * valid).max())
            (lp * valid).sum().add((ent * valid).sum()).backward()
            # each rank holds the gradient of its own positions: their sum is the whole gradient
            worst = 0.0
            for name, grad in _grads(model).items():
                dist.all_reduce(grad)
                worst = max(worst, float((grad - ref_grads[name]).abs().max()))
            errors[f"{tag}/grad"] = worst
            # actor.calculate_sum_pi_squared: sum_v pi(v)^2 gathered back to whole sequences like the log-probs
            ref_sq = response_logits_forward(model, micro, TEMPERATURE, False, False, packed, None, True)[2]
            sp_out = sequence_parallel_response_forward(
                model, micro, TEMPERATURE, False, False, packed, group, 1.0, True
            )
            errors[f"{tag}/sum_pi_squared"] = float(((sp_out[2] - ref_sq).abs() * valid).max())
    value_model = load_value_model(_shared_model_dir(), dtype=torch.float32, head_init_std=0.5)
    value_model.set_attn_implementation("sdpa")
    ref_values = response_values_forward(value_model, micro, False)
    enable_ulysses_attention(value_model)
    values = sequence_parallel_values_forward(value_model, micro, False, group, 1.0)
    errors["critic/values"] = float(((values - ref_values).abs() * valid).max())
    errors["critic/values-nonzero"] = float(ref_values.abs().max() < 1e-3)  # the comparison is not of zeros
    return errors


_MODEL_DIR = {"path": ""}


def _shared_model_dir() -> str:
    return _MODEL_DIR["path"]


def _sharding_cases(rank: int) -> dict[str, float]:
    """fsdp_size=1 on 2 ranks is hybrid sharding (replicate 2 x shard 1): whole local shards, a 2-D mesh, and the
    layered gather yields the same tensors as the full state dict."""
    from torch.distributed.tensor import DTensor

    from verl.models.tiny import make_tiny_causal_lm
    from verl.utils import fsdp_utils

    errors: dict[str, float] = {}
    for fsdp_size in (-1, 1):
        model = make_tiny_causal_lm(seed=2)
        plain = {k: v.clone() for k, v in model.state_dict().items()}
        mesh = fsdp_utils.fsdp_mesh("cpu", fsdp_size)
        fsdp_utils.apply_fsdp2(model, mesh=mesh)
        weight = model.model.layers[0].mlp.up_proj.weight
        assert isinstance(weight, DTensor)
        full_rows = plain["model.layers.0.mlp.up_proj.weight"].shape[0]
        expected_rows = full_rows if fsdp_size == 1 else full_rows // 2
        errors[f"fsdp_size={fsdp_size}/local-rows"] = float(weight.to_local().shape[0] != expected_rows)
        errors[f"fsdp_size={fsdp_size}/mesh-dims"] = float(weight.device_mesh.ndim != (2 if fsdp_size == 1 else 1))
        layered = dict(fsdp_utils.iter_full_params_layered(model))
        errors[f"fsdp_size={fsdp_size}/layered-names"] = float(set(layered) != set(plain))
        errors[f"fsdp_size={fsdp_size}/layered-values"] = max(float((layered[k] - plain[k]).abs().max()) for k in plain)
    return errors


def _worker(rank: int, port: int, model_dir: str, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    _MODEL_DIR["path"] = model_dir
    try:
        queue.put((rank, {"sp": _sequence_parallel_cases(rank), "fsdp": _sharding_cases(rank)}))
    except BaseException as err:  # report instead of leaving the parent waiting
        queue.put((rank, repr(err)))
        raise
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_rank_results(tiny_model_dir: str) -> dict[str, dict[str, float]]:
    """Both cases in one pair of processes (starting them is most of the cost)."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, port, tiny_model_dir, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    for rank, result in results.items():
        assert isinstance(result, dict), f"rank {rank} failed: {result}"
    return results[0]


def test_ulysses_matches_unsplit_forward_and_gradients(two_rank_results) -> None:
    errors = two_rank_results["sp"]
    assert len(errors) == 2 * 2 * 5 + 2
    for name, err in errors.items():
        assert err < 1e-5, f"{name}: max deviation {err}"


def test_hybrid_sharding_mesh_and_layered_gather(two_rank_results) -> None:
    errors = two_rank_results["fsdp"]
    assert len(errors) == 2 * 4
    for name, err in errors.items():
        assert err == 0.0, f"{name}: {err}"
