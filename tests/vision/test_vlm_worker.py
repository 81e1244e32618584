"""The actor/rollout worker on a tiny Qwen2-VL directory: the processor is loaded with the model,
``actor.freeze_vision_tower`` keeps the vision tower out of the update, packed (remove-padding) micro-batches
included."""

from __future__ import annotations

import pytest
import torch

from verl.data.rl_dataset import RLHFDataset, collate_fn
from verl.data.synthetic_vision import write_colour_parquet
from verl.models.tiny_vlm import make_tiny_vlm
from verl.protocol import DataProto
from verl.single_controller import create_worker_group
from verl.trainer.config.loader import load_config
from verl.workers.fsdp_workers import ActorRolloutRefWorker


def _group(model_dir: str, *extra: str):
    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.rollout.n=1",
            "actor_rollout_ref.rollout.name=hf",
            "data.train_batch_size=4",
            "data.max_response_length=3",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.dtype=float32",
            "actor_rollout_ref.actor.optim.lr=0.01",
            "actor_rollout_ref.rollout.dtype=float32",
            "algorithm.adv_estimator=gae",  # the worker does not care; gae keeps n=1 free of a warning
            *extra,
        ]
    )
    group = create_worker_group(
        "local", ActorRolloutRefWorker, {"config": cfg.actor_rollout_ref, "role": "actor_rollout"}
    )
    group.init_model()
    return group


def test_freeze_vision_tower_through_the_worker(tmp_path) -> None:
    model_dir = str(tmp_path / "model")
    _, processor = make_tiny_vlm("qwen2_vl", save_dir=model_dir)
    group = _group(
        model_dir, "actor_rollout_ref.actor.freeze_vision_tower=true", "actor_rollout_ref.model.use_remove_padding=true"
    )
    worker = group.workers[0]
    assert worker.processor is not None and worker.actor.use_remove_padding is True
    module = worker.actor_module
    visual = {n: p.detach().clone() for n, p in module.model.visual.named_parameters()}
    lm_head = module.lm_head.weight.detach().clone()
    path = write_colour_parquet(str(tmp_path / "train.parquet"), n=4)
    dataset = RLHFDataset(path, processor.tokenizer, {"max_prompt_length": 64}, processor=processor)
    prompts = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(4)]))
    tok = processor.tokenizer
    prompts.meta_info.update(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    out = group.generate_sequences(prompts)
    batch = out  # the engine's output keeps the prompt's columns (multi_modal_inputs included)
    assert "multi_modal_inputs" in batch.non_tensor_batch
    batch.batch["advantages"] = torch.randn_like(batch.batch["responses"], dtype=torch.float32)
    batch.meta_info.update(global_steps=1, temperature=1.0)
    batch = batch.union(group.compute_log_prob(batch).select(batch_keys=["old_log_probs"]))
    group.update_actor(batch)
    assert all(torch.equal(p, visual[n]) for n, p in module.model.visual.named_parameters())
    assert not torch.equal(module.lm_head.weight, lm_head)


def test_critic_on_a_vision_language_model_is_refused(tmp_path) -> None:
    from verl.workers.fsdp_workers import CriticWorker

    model_dir = str(tmp_path / "model")
    make_tiny_vlm("qwen2_vl", save_dir=model_dir)
    cfg = load_config([f"actor_rollout_ref.model.path={model_dir}", "algorithm.adv_estimator=gae"])
    group = create_worker_group("local", CriticWorker, {"config": cfg.critic})
    with pytest.raises(ValueError, match="is a vision-language model: a critic that sees the images is not supported"):
        group.init_model()
