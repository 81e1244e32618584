"""The hybrid engine: the ``hf`` rollout generates with the actor's own parameters (no second copy of the weights),
and under FSDP2 ``full_params`` gathers the full parameters for generation and reshards them afterwards."""

from __future__ import annotations

import torch

from verl.model_merger import merge_checkpoint
from verl.protocol import DataProto
from verl.single_controller import create_worker_group
from verl.workers.fsdp_workers import ActorRolloutRefWorker

PROMPT_LEN, RESPONSE_LEN, BATCH, PAD = 4, 5, 4, 256


def _group(model_dir: str, role: str):
    from verl.trainer.config.loader import load_config

    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.rollout.n=1",
            f"data.train_batch_size={BATCH}",
            f"data.max_response_length={RESPONSE_LEN}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH}",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.dtype=float32",
            "actor_rollout_ref.actor.optim.lr=0.05",
            "actor_rollout_ref.rollout.dtype=float32",
            "actor_rollout_ref.rollout.do_sample=false",
            "algorithm.adv_estimator=gae",
            "critic.ppo_micro_batch_size_per_gpu=2",
        ]
    )
    group = create_worker_group("local", ActorRolloutRefWorker, {"config": cfg.actor_rollout_ref, "role": role})
    group.init_model()
    return group


def _prompts() -> DataProto:
    ids = torch.randint(0, 256, (BATCH, PROMPT_LEN), generator=torch.Generator().manual_seed(9))
    return DataProto.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "position_ids": torch.arange(PROMPT_LEN).repeat(BATCH, 1),
        },
        meta_info={"do_sample": False, "eos_token_id": 258, "pad_token_id": PAD},
    )


def _storages(module: torch.nn.Module) -> set[int]:
    return {p.untyped_storage().data_ptr() for p in module.parameters()}


def test_rollout_shares_the_actor_parameters(tiny_model_dir: str) -> None:
    group = _group(tiny_model_dir, "actor_rollout")
    worker = group.workers[0]
    assert worker.rollout.module is worker.actor_module
    assert _storages(worker.rollout.module) == _storages(worker.actor_module)
    # actor_rollout holds exactly one model: no reference and no rollout copy
    assert worker.ref_module is None


def test_generation_sees_each_update_without_a_sync(tiny_model_dir: str, tmp_path) -> None:
    """After update_actor, greedy generation equals transformers' greedy decoding of the *saved updated* weights."""
    from transformers import AutoModelForCausalLM

    group = _group(tiny_model_dir, "actor_rollout")
    prompts = _prompts()
    before = group.generate_sequences(prompts)
    gen = torch.Generator().manual_seed(4)
    data = before.union(group.compute_log_prob(before).select(batch_keys=["old_log_probs"]))
    data.batch["advantages"] = torch.randn(BATCH, RESPONSE_LEN, generator=gen) * data.batch["response_mask"]
    # a few large steps, so the greedy continuation changes
    for _ in range(3):
        group.update_actor(data)
    after = group.generate_sequences(prompts)
    group.save_checkpoint(str(tmp_path / "ckpt"))

    merged = merge_checkpoint(str(tmp_path / "ckpt"), str(tmp_path / "merged"))
    updated = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32).eval()
    with torch.no_grad():
        expected = updated.generate(
            input_ids=prompts.batch["input_ids"],
            attention_mask=prompts.batch["attention_mask"],
            max_new_tokens=RESPONSE_LEN,
            do_sample=False,
            eos_token_id=258,
            pad_token_id=PAD,
        )[:, PROMPT_LEN:]
    got = after.batch["responses"][:, : expected.shape[1]]
    assert torch.equal(got, expected)
    assert not torch.equal(after.batch["responses"], before.batch["responses"])


def test_full_params_gathers_for_generation_and_reshards(single_rank_group) -> None:
    from torch.distributed.tensor import DTensor

    from verl.models.tiny import make_tiny_causal_lm
    from verl.utils import fsdp_utils

    model = make_tiny_causal_lm(seed=2)
    ids = torch.randint(0, 256, (2, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain_logits = model(ids).logits
        plain_greedy = model.generate(ids, max_new_tokens=4, do_sample=False, eos_token_id=None, pad_token_id=PAD)
    fsdp_utils.apply_fsdp2(model)
    assert fsdp_utils.is_fsdp_module(model)
    weight_owner = model.model.layers[0].mlp.up_proj
    assert isinstance(weight_owner.weight, DTensor)
    with fsdp_utils.full_params(model):
        assert not isinstance(weight_owner.weight, DTensor)  # plain full tensors: forwards need no collectives
        assert tuple(weight_owner.weight.shape) == (128, 64)
        with torch.no_grad():
            greedy = model.generate(ids, max_new_tokens=4, do_sample=False, eos_token_id=None, pad_token_id=PAD)
    assert isinstance(weight_owner.weight, DTensor)  # resharded on exit
    assert torch.equal(greedy, plain_greedy)
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, plain_logits, atol=1e-6, rtol=0)
    # a module that is not sharded passes through untouched
    plain = make_tiny_causal_lm(seed=2)
    with fsdp_utils.full_params(plain):
        assert not fsdp_utils.is_fsdp_module(plain)
