"""The upstream-style recipe in ``recipe/mean_baseline`` trains one step on the tiny model (CPU): its advantage
estimator, policy loss, reward manager, dataset class (``data.custom_cls``) and trainer subclass all take part."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # recipe/ sits next to verl/, as upstream; it is not an installed package
    sys.path.insert(0, str(ROOT))

from recipe.mean_baseline import main_mb  # noqa: E402
from recipe.mean_baseline.core_algos import compute_median_baseline_advantage  # noqa: E402
from recipe.mean_baseline.mb_ray_trainer import distinct_response_fraction  # noqa: E402
from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet  # noqa: E402
from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn  # noqa: E402
from verl.workers.reward_manager import get_reward_manager_cls  # noqa: E402


def test_recipe_pieces_are_registered_and_compute_what_they_say() -> None:
    assert get_adv_estimator_fn("recipe_median_baseline") is compute_median_baseline_advantage
    rewards = torch.zeros(5, 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 4.0, 2.0, 7.0])
    index = np.array(["a", "a", "a", "b", "c"], dtype=object)
    adv, _ = compute_median_baseline_advantage(rewards, torch.ones(5, 3), index)
    assert adv[:, 0].tolist() == [0.0, -1.0, 3.0, 0.0, 0.0]  # group a's median is 1; b, c are alone
    loss_fn = get_policy_loss_fn("recipe_truncated_is")
    log_prob = torch.zeros(1, 2, requires_grad=True)
    loss, metrics = loss_fn(torch.tensor([[0.0, -5.0]]), log_prob, torch.ones(1, 2), torch.ones(1, 2))
    loss.backward()
    # w = min(exp(0 - old), 2) = [1, 2]; d(-w*A*logp)/dlogp averaged over 2 tokens
    assert log_prob.grad.tolist() == [[-0.5, -1.0]] and metrics["actor/is_truncated_frac"] == 0.5
    assert get_reward_manager_cls("recipe_difficulty").__name__ == "DifficultyWeightedRewardManager"
    assert distinct_response_fraction(torch.tensor([[1, 2], [1, 2], [3, 4]]), ["u", "u", "v"]) == 0.75


def test_recipe_trains_one_step_on_the_tiny_model(tiny_model_dir: str, tmp_path: Path) -> None:
    train, test = generate_arithmetic_splits(train_size=8, test_size=2, seed=3)
    write_parquet(train, str(tmp_path / "train.parquet"))
    write_parquet(test, str(tmp_path / "test.parquet"))
    out = tmp_path / "out"
    main_mb.main(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            f"data.train_files={tmp_path / 'train.parquet'}",
            f"data.val_files={tmp_path / 'test.parquet'}",
            "data.train_batch_size=2",
            "data.max_prompt_length=128",
            "data.max_response_length=2",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "actor_rollout_ref.actor.dtype=float32",
            "actor_rollout_ref.rollout.dtype=float32",
            "+reward_model.reward_kwargs.hard_bonus=0.25",
            "trainer.total_training_steps=1",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=0",
            "trainer.logger=[file]",
            "trainer.export_hf=false",
            "trainer.plot=false",
            f"trainer.default_local_dir={out}",
        ]
    )
    records = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1]
    metrics = records[0]["metrics"]
    # the trainer subclass's stage ran, and so did the recipe's loss (its own metric) on the recipe's advantages
    assert 0.0 < metrics["recipe/distinct_response_frac"] <= 1.0
    assert "actor/is_truncated_frac" in metrics and "actor/pg_loss" in metrics
    # the custom dataset class tagged every row (arithmetic answers have at least one digit) and the recipe's
    # reward manager reported it
    assert metrics["reward_extra/difficulty/min"] >= 1.0 and "reward_extra/acc/mean" in metrics


def test_custom_cls_errors_name_the_key(byte_tokenizer, tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    from verl.trainer.config.validation import ConfigError
    from verl.trainer.main_ppo import create_rl_dataset

    train, _ = generate_arithmetic_splits(train_size=2, test_size=1, seed=1)
    write_parquet(train, str(tmp_path / "t.parquet"))
    (tmp_path / "not_a_dataset.py").write_text("class Plain:\n    pass\n")
    base = {"max_prompt_length": 128, "prompt_key": "prompt"}
    cfg = OmegaConf.create({**base, "custom_cls": {"path": str(tmp_path / "not_a_dataset.py"), "name": "Nope"}})
    with pytest.raises(ConfigError, match="data.custom_cls: Custom type 'Nope' not found.*Plain"):
        create_rl_dataset(str(tmp_path / "t.parquet"), cfg, byte_tokenizer)
    cfg.custom_cls.name = "Plain"
    with pytest.raises(TypeError, match="'Plain'.*must inherit from torch.utils.data.Dataset"):
        create_rl_dataset(str(tmp_path / "t.parquet"), cfg, byte_tokenizer)
    cfg.custom_cls = {"path": str(ROOT / "recipe" / "mean_baseline" / "dataset.py"), "name": "DifficultyTaggedDataset"}
    dataset = create_rl_dataset(str(tmp_path / "t.parquet"), cfg, byte_tokenizer)
    assert type(dataset).__name__ == "DifficultyTaggedDataset" and dataset[0]["extra_info"]["difficulty"] >= 1


def test_ray_ppo_trainer_takes_verls_constructor_arguments(tmp_path: Path) -> None:
    from verl.single_controller.ray import RayWorkerGroup
    from verl.trainer.config import load_config
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer, ResourcePoolManager, Role
    from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker

    config = load_config([f"trainer.default_local_dir={tmp_path}", "trainer.device=cpu"])
    pools = ResourcePoolManager(
        resource_pool_spec={"global_pool": [1], "critic_pool": [1]},
        mapping={Role.ActorRollout: "global_pool", Role.RefPolicy: "global_pool", Role.Critic: "critic_pool"},
    )
    mapping = {
        Role.ActorRollout: ActorRolloutRefWorker,
        Role.RefPolicy: ActorRolloutRefWorker,
        Role.Critic: CriticWorker,
    }
    kwargs = dict(config=config, tokenizer=None, role_worker_mapping=mapping, resource_pool_manager=pools)
    trainer = RayPPOTrainer(**kwargs, ray_worker_group_cls=RayWorkerGroup, processor=None, device_name="cpu")
    assert trainer.role_worker_mapping == {"actor_rollout": ActorRolloutRefWorker, "critic": CriticWorker}
    from verl.trainer.ppo.worker_roles import pool_settings

    assert pool_settings(trainer.config.trainer, trainer.resource_pool_manager) == {
        "resource_pool_spec": {"global_pool": [1], "critic_pool": [1]},
        "resource_pool_mapping": {"actor_rollout": "global_pool", "critic": "critic_pool"},
    }
    assert pools.get_n_gpus() == 2
    processor = object()  # a vision-language model's processor is accepted and kept
    assert RayPPOTrainer(**kwargs, processor=processor).processor is processor
    with pytest.raises(ValueError, match="ray_worker_group_cls=.*not supported"):
        RayPPOTrainer(**kwargs, ray_worker_group_cls=dict)
    with pytest.raises(ValueError, match="device_name='cuda' but trainer.device='cpu'"):
        RayPPOTrainer(**kwargs, device_name="cuda")
    with pytest.raises(ValueError, match="Critic -> pool 'nope'"):
        ResourcePoolManager({"global_pool": [1]}, {Role.Critic: "nope"}).pool_settings()
