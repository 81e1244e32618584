"""Two FSDP2 ranks (Ray backend, gloo on CPU) must train, score and generate exactly like one process.

The batch is built by hand (no sampling): fixed prompts/responses, fixed advantages and ``old_log_probs`` equal to
the model's own log-probs (so the PPO ratio is 1 and nothing is clipped). The response lengths are deliberately
unequal between the two halves of the batch (rank 0 gets short responses, rank 1 long ones): a per-rank token-mean
averaged over ranks would then weight rank 0's tokens more than a global token-mean does, so the test catches
loss-normalisation errors, not only sharding errors.

To make the parameter comparison sensitive to the gradient itself, AdamW runs with ``eps = lr = 1e4``: its first
step is ``-lr * g / (|g| + eps)``, i.e. ``-g`` to within ``|g| / 1e4``, so the parameter change *is* the gradient
(with tiny eps Adam's first step is ``-lr * sign(g)`` and would hide a wrongly weighted gradient).
"""

from __future__ import annotations

import os

import pytest
import torch

pytestmark = pytest.mark.slow

ray = pytest.importorskip("ray")

# Tolerances: fp32 on CPU; the two runs differ only in the order of reductions (gloo all-reduce/reduce-scatter,
# micro-batch accumulation), which moves results by a few ulps of the values involved.
LOSS_ATOL = 1e-5
PARAM_ATOL = 2e-6  # on parameter changes of order 1e-3..1e-1
LOGPROB_ATOL = 1e-5

RESPONSE_LEN = 6
PROMPT_LEN = 5
BATCH = 8  # rows 0-3 go to rank 0, rows 4-7 to rank 1
RESPONSE_LENGTHS = [1, 2, 1, 2, 6, 6, 5, 6]  # valid response tokens per row (unequal across the two ranks)


def _config(model_dir: str, world_size: int, extra: tuple[str, ...] = ()):
    from verl.trainer.config.loader import load_config

    return load_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.rollout.n=1",
            f"data.train_batch_size={BATCH}",
            f"data.max_response_length={RESPONSE_LEN}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH}",  # one optimizer step over the whole batch
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.dtype=float32",
            "actor_rollout_ref.actor.grad_clip=0.0",
            "actor_rollout_ref.actor.optim.lr=10000.0",
            "actor_rollout_ref.actor.optim.eps=10000.0",
            "actor_rollout_ref.actor.loss_agg_mode=token-mean",
            "actor_rollout_ref.rollout.dtype=float32",
            "actor_rollout_ref.rollout.do_sample=false",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=3",
            "algorithm.adv_estimator=gae",
            "critic.ppo_micro_batch_size_per_gpu=2",
            f"trainer.n_gpus_per_node={world_size}",
            *extra,
        ]
    )


def _make_group(backend: str, model_dir: str, world_size: int, extra: tuple[str, ...] = ()):
    from verl.single_controller import create_worker_group
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    cfg = _config(model_dir, world_size, extra)
    group = create_worker_group(
        backend,
        ActorRolloutRefWorker,
        {"config": cfg.actor_rollout_ref, "role": "actor_rollout_ref"},
        world_size=world_size,
        use_gpu=False,
    )
    group.init_model()
    return group


def _reference_model(model_dir: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def _response_log_probs(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """log p(response token) from a plain transformers forward: ``[batch, response_len]``."""
    logits = model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
    ).logits
    logits = logits[:, -RESPONSE_LEN - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)


@pytest.fixture(scope="module")
def fixed_batch(tiny_model_dir: str) -> dict[str, torch.Tensor]:
    """Left-padded prompts, right-padded responses with RESPONSE_LENGTHS valid tokens, advantages, old log-probs."""
    gen = torch.Generator().manual_seed(123)
    pad = 256
    prompt_lens = [5, 3, 4, 5, 2, 5, 4, 3]
    prompts = torch.full((BATCH, PROMPT_LEN), pad)
    prompt_mask = torch.zeros(BATCH, PROMPT_LEN, dtype=torch.long)
    responses = torch.full((BATCH, RESPONSE_LEN), pad)
    response_mask = torch.zeros(BATCH, RESPONSE_LEN, dtype=torch.long)
    for i in range(BATCH):
        prompts[i, PROMPT_LEN - prompt_lens[i] :] = torch.randint(0, 256, (prompt_lens[i],), generator=gen)
        prompt_mask[i, PROMPT_LEN - prompt_lens[i] :] = 1
        responses[i, : RESPONSE_LENGTHS[i]] = torch.randint(0, 256, (RESPONSE_LENGTHS[i],), generator=gen)
        response_mask[i, : RESPONSE_LENGTHS[i]] = 1
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    batch = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        "response_mask": response_mask,
        "advantages": torch.randn(BATCH, RESPONSE_LEN, generator=gen) * response_mask,
    }
    with torch.no_grad():
        batch["old_log_probs"] = _response_log_probs(_reference_model(tiny_model_dir), batch)
    return batch


def _expected_update(model_dir: str, batch: dict[str, torch.Tensor]) -> tuple[float, dict[str, torch.Tensor]]:
    """Independent reference: the global token-mean PPO loss and AdamW's first step on it, by plain autograd.

    At ratio 1 the clipped objective's gradient is that of ``-sum(A * exp(logp - old) * mask) / sum(mask)``;
    AdamW's first step with zero weight decay is ``-lr * g / (|g| + eps)`` (bias corrections cancel at step 1).
    """
    model = _reference_model(model_dir)
    log_probs = _response_log_probs(model, batch)
    mask = batch["response_mask"].float()
    ratio = torch.exp(log_probs - batch["old_log_probs"])
    loss = -(batch["advantages"] * ratio * mask).sum() / mask.sum()
    loss.backward()
    lr = eps = 1e4
    updates = {n: -lr * p.grad / (p.grad.abs() + eps) for n, p in model.named_parameters()}
    return float(loss.detach()), updates


def _proto(batch: dict[str, torch.Tensor]):
    from verl.protocol import DataProto

    return DataProto.from_dict(tensors={k: v.clone() for k, v in batch.items()}, meta_info={"global_steps": 1})


def _saved_params(group, path: str) -> dict[str, torch.Tensor]:
    from verl.model_merger import load_full_state_dict

    group.save_checkpoint(path)
    return load_full_state_dict(path)


def test_two_rank_update_matches_one_rank_and_autograd(ray_cpu, tiny_model_dir, fixed_batch, tmp_path) -> None:
    from safetensors.torch import load_file

    initial = load_file(os.path.join(tiny_model_dir, "model.safetensors"))
    expected_loss, expected_update = _expected_update(tiny_model_dir, fixed_batch)
    # The loss at ratio 1 is minus the token-mean advantage, known without the model.
    mask = fixed_batch["response_mask"].float()
    assert expected_loss == pytest.approx(-float((fixed_batch["advantages"] * mask).sum() / mask.sum()), abs=1e-6)

    results = {}
    for backend, world_size in (("local", 1), ("ray", 2)):
        group = _make_group(backend, tiny_model_dir, world_size)
        try:
            metrics = group.update_actor(_proto(fixed_batch)).meta_info["metrics"]
            params = _saved_params(group, str(tmp_path / f"ckpt_{world_size}"))
            # A NaN on one rank stops every rank (no rank left waiting in a collective), naming step and micro-batch.
            bad = _proto(fixed_batch)
            bad.batch["advantages"][5, 0] = float("nan")  # row 5: micro-batch 0 of rank 1, micro-batch 2 of 1 rank
            micro = 0 if world_size == 2 else 2
            with pytest.raises(
                RuntimeError, match=rf"non-finite loss.* global step 1, epoch 0, mini-batch 0, micro-batch {micro}"
            ):
                group.update_actor(bad)
            # every rank is still in step: a collective call (sharded forward) completes
            assert group.compute_log_prob(_proto(fixed_batch)).batch["old_log_probs"].shape == (BATCH, RESPONSE_LEN)
        finally:
            group.shutdown()
        # one value per rank (one mini-batch each); their mean is the global mini-batch loss
        assert len(metrics["actor/pg_loss"]) == world_size
        results[world_size] = (sum(metrics["actor/pg_loss"]) / world_size, metrics["actor/grad_norm"], params)

    for world_size, (pg_loss, _, _) in results.items():
        assert pg_loss == pytest.approx(expected_loss, abs=LOSS_ATOL), f"world_size={world_size}"
    # the clipped global gradient norm is the same number on every rank and in the 1-rank run
    norms = results[1][1] + results[2][1]
    assert max(norms) - min(norms) < 1e-4 * max(norms)

    one, two = results[1][2], results[2][2]
    assert one.keys() == two.keys()
    largest = 0.0
    for name, start in initial.items():
        delta_one, delta_two = one[name] - start, two[name] - start
        largest = max(largest, float(expected_update[name].abs().max()))
        torch.testing.assert_close(delta_one, expected_update[name], atol=PARAM_ATOL, rtol=0, msg=name)
        torch.testing.assert_close(delta_two, delta_one, atol=PARAM_ATOL, rtol=0, msg=name)
    assert largest > 1e-3  # the update is far above the tolerance, so the comparison is meaningful

    # the 2-rank checkpoint (each rank wrote its own shards) resumes on 1 rank with exactly the saved weights
    single = _make_group("local", tiny_model_dir, 1)
    try:
        single.load_checkpoint(str(tmp_path / "ckpt_2"))
        reloaded = _saved_params(single, str(tmp_path / "ckpt_2_on_1"))
    finally:
        single.shutdown()
    for name, value in two.items():
        assert torch.equal(reloaded[name], value), name


def test_two_rank_log_probs_and_generation_match_one_rank(ray_cpu, tiny_model_dir, fixed_batch) -> None:
    """compute_log_prob / compute_ref_log_prob on sharded models equal the plain forward; greedy generation under
    ``full_params`` equals the 1-rank output even when the ranks decode a different number of steps."""
    from verl.protocol import DataProto

    model = _reference_model(tiny_model_dir)
    keys = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask")
    scoring = {k: fixed_batch[k] for k in keys}

    # Prompts for generation: rank 0 gets 4 copies of prompt A, rank 1 four copies of prompt B. The EOS id is the
    # first greedy token after A, so rank 0 finishes after 1 step while rank 1 decodes all RESPONSE_LEN steps (B's
    # greedy continuation is checked not to contain it). Only a collective-free decode can survive this.
    candidates = torch.randint(0, 256, (16, PROMPT_LEN), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        greedy = model.generate(
            input_ids=candidates,
            attention_mask=torch.ones_like(candidates),
            max_new_tokens=RESPONSE_LEN,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=256,
        )[:, PROMPT_LEN:]
    eos = int(greedy[0, 0])
    b_index = next(i for i in range(1, 16) if eos not in greedy[i].tolist())
    prompt_ids = torch.cat([candidates[0:1].repeat(4, 1), candidates[b_index : b_index + 1].repeat(4, 1)])
    prompts = DataProto.from_dict(
        tensors={
            "input_ids": prompt_ids,
            "attention_mask": torch.ones_like(prompt_ids),
            "position_ids": torch.arange(PROMPT_LEN).repeat(BATCH, 1),
        },
        meta_info={"eos_token_id": eos, "pad_token_id": 256, "do_sample": False},
    )

    outputs = {}
    for backend, world_size in (("local", 1), ("ray", 2)):
        group = _make_group(backend, tiny_model_dir, world_size)
        try:
            lp = group.compute_log_prob(DataProto.from_dict(tensors=dict(scoring)))
            ref = group.compute_ref_log_prob(DataProto.from_dict(tensors=dict(scoring)))
            gen = group.generate_sequences(prompts)
            # after generation the parameters are sharded again and training still lines up across ranks
            lp_after = group.compute_log_prob(DataProto.from_dict(tensors=dict(scoring)))
            # 7 rows do not split over 2 ranks: refused by default, padded to 8 and stripped again on request
            seven = {k: v[:7] for k, v in scoring.items()}
            if world_size == 2:
                with pytest.raises(ValueError, match=r"7 rows evenly over 2 ranks \(7 % 2 = 1\)"):
                    group.compute_log_prob(DataProto.from_dict(tensors=dict(seven)))
            padded = group.compute_log_prob(DataProto.from_dict(tensors=seven, meta_info={"_verl_auto_padding": True}))
            assert len(padded) == 7
            torch.testing.assert_close(padded.batch["old_log_probs"], lp.batch["old_log_probs"][:7], atol=1e-6, rtol=0)
        finally:
            group.shutdown()
        outputs[world_size] = (lp, ref, gen, lp_after)

    with torch.no_grad():
        expected = _response_log_probs(model, fixed_batch) * fixed_batch["response_mask"]
    for world_size, (lp, ref, gen, lp_after) in outputs.items():
        mask = fixed_batch["response_mask"]
        for name, got in (
            ("old_log_probs", lp.batch["old_log_probs"]),
            ("ref_log_prob", ref.batch["ref_log_prob"]),
            ("old_log_probs after generate", lp_after.batch["old_log_probs"]),
        ):
            torch.testing.assert_close(got * mask, expected, atol=LOGPROB_ATOL, rtol=0, msg=f"{name} ws={world_size}")
        assert lp.batch["entropys"].shape == (BATCH, RESPONSE_LEN)
        response_mask = gen.batch["response_mask"]
        assert response_mask[:4].sum(-1).tolist() == [1, 1, 1, 1], f"ws={world_size}"
        assert response_mask[4:].sum(-1).tolist() == [RESPONSE_LEN] * 4, f"ws={world_size}"
        assert gen.batch["responses"][4:].tolist() == greedy[b_index].repeat(4, 1).tolist()
    assert torch.equal(outputs[1][2].batch["responses"], outputs[2][2].batch["responses"])


@pytest.mark.parametrize(
    "extra",
    [
        # Ulysses: both ranks form one sequence-parallel group (data-parallel size 1); ref follows the actor's size
        ("actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",),
        # hybrid sharding: shard within groups of 1 rank, replicate across the 2 groups (all-reduced gradients)
        ("actor_rollout_ref.actor.fsdp_config.fsdp_size=1", "actor_rollout_ref.ref.fsdp_config.fsdp_size=1"),
    ],
    ids=["ulysses_sp2", "hsdp_fsdp_size1"],
)
def test_two_rank_parallel_layouts_match_autograd(ray_cpu, tiny_model_dir, fixed_batch, tmp_path, extra) -> None:
    """Sequence parallelism and hybrid sharding change where the work runs, not the numbers: log-probs, reference
    log-probs, the PPO loss and the parameter update equal the plain autograd reference."""
    from safetensors.torch import load_file

    initial = load_file(os.path.join(tiny_model_dir, "model.safetensors"))
    expected_loss, expected_update = _expected_update(tiny_model_dir, fixed_batch)
    with torch.no_grad():
        expected_lp = _response_log_probs(_reference_model(tiny_model_dir), fixed_batch) * fixed_batch["response_mask"]
    keys = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask")
    scoring = {k: fixed_batch[k] for k in keys}
    group = _make_group("ray", tiny_model_dir, 2, extra)
    try:
        lp = group.compute_log_prob(_proto(scoring)).batch["old_log_probs"]
        ref = group.compute_ref_log_prob(_proto(scoring)).batch["ref_log_prob"]
        metrics = group.update_actor(_proto(fixed_batch)).meta_info["metrics"]
        params = _saved_params(group, str(tmp_path / "ckpt"))
    finally:
        group.shutdown()
    mask = fixed_batch["response_mask"]
    torch.testing.assert_close(lp * mask, expected_lp, atol=LOGPROB_ATOL, rtol=0)
    torch.testing.assert_close(ref * mask, expected_lp, atol=LOGPROB_ATOL, rtol=0)
    assert sum(metrics["actor/pg_loss"]) / len(metrics["actor/pg_loss"]) == pytest.approx(expected_loss, abs=LOSS_ATOL)
    for name, start in initial.items():
        torch.testing.assert_close(params[name] - start, expected_update[name], atol=PARAM_ATOL, rtol=0, msg=name)
