"""A recipe written against verl 0.7/0.8 imports and runs unchanged: its own advantage estimator (registered with an
Enum member), policy loss, reward manager and scorer, verl's DataProto helpers and validation metrics."""

from __future__ import annotations

from enum import Enum

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from torch.utils.data import DataLoader

# --- the imports exactly as upstream recipes write them ---
from verl import DataProto
from verl.protocol import (
    DataProtoConfig,
    collate_fn,
    deserialize_tensordict,
    pad_dataproto_to_divisor,
    serialize_tensordict,
    union_tensor_dict,
    unpad_dataproto,
)
from verl.rewards import default_compute_score, gsm8k, math_dapo, prime_math
from verl.rewards import math as math_reward
from verl.rewards.sandbox_fusion import compute_score as sandbox_fusion_compute_score
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import (
    AdvantageEstimator,
    agg_loss,
    get_adv_estimator_fn,
    get_policy_loss_fn,
    register_adv_est,
    register_policy_loss,
)
from verl.trainer.ppo.metric_utils import (
    bootstrap_metric,
    calc_maj_val,
    compute_data_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
    process_validation_metrics,
)
from verl.trainer.ppo.reward import load_reward_manager
from verl.workers.reward_manager import register as register_reward_manager
from verl.workers.reward_manager.abstract import AbstractRewardManager


class RecipeEstimator(str, Enum):
    """A recipe's own estimator names, as upstream recipes declare them."""

    MEAN_BASELINE = "recipe_mean_baseline"


@register_adv_est(RecipeEstimator.MEAN_BASELINE)
def compute_mean_baseline_advantage(token_level_rewards, response_mask, index=None, config=None, **kwargs):
    """Score minus the batch mean, broadcast over the response tokens."""
    scores = token_level_rewards.sum(-1)
    adv = (scores - scores.mean()).unsqueeze(-1) * response_mask
    return adv, adv


@register_policy_loss("recipe_reinforce")
def compute_policy_loss_reinforce(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    pg_loss = agg_loss(loss_mat=-advantages * log_prob, loss_mask=response_mask, loss_agg_mode=loss_agg_mode)
    return pg_loss, {"actor/pg_loss": pg_loss.detach().item()}


class _CharTokenizer:
    """Decodes token ids as characters (enough for a reward manager)."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids if i > 0)


@register_reward_manager("recipe_length")
class LengthRewardManager(AbstractRewardManager):
    """An upstream-style manager: verl's constructor arguments only, its own ``__call__``."""

    def __init__(self, tokenizer, num_examine, compute_score=None, reward_fn_key="data_source", target_len=3):
        self.tokenizer = tokenizer
        self.target_len = target_len

    def __call__(self, data: DataProto, return_dict: bool = False):
        reward = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        lengths = data.batch["response_mask"].sum(-1)
        for i, n in enumerate(lengths.tolist()):
            reward[i, max(n - 1, 0)] = -abs(n - self.target_len)
        return {"reward_tensor": reward, "reward_extra_info": {"len": lengths.tolist()}} if return_dict else reward


def _rollout_batch() -> DataProto:
    prompts = torch.tensor([[0, 72], [72, 73]])
    responses = torch.tensor([[65, 66, 0, 0], [65, 66, 67, 68]])
    response_mask = (responses > 0).long()
    attention_mask = torch.cat([(prompts > 0).long(), response_mask], dim=-1)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "response_mask": response_mask,
            "attention_mask": attention_mask,
            "input_ids": torch.cat([prompts, responses], -1),
        },
        non_tensors={"data_source": np.array(["x", "x"], dtype=object), "uid": np.array(["a", "b"], dtype=object)},
    )


def test_registries_take_enum_members_and_names():
    assert get_adv_estimator_fn(RecipeEstimator.MEAN_BASELINE) is compute_mean_baseline_advantage
    assert get_adv_estimator_fn("recipe_mean_baseline") is compute_mean_baseline_advantage
    assert get_adv_estimator_fn(AdvantageEstimator.GRPO) is core_algos.compute_grpo_outcome_advantage
    # re-registering another function under a taken name is refused, as upstream does
    with pytest.raises(ValueError, match="already been registered"):
        register_adv_est(AdvantageEstimator.GRPO)(compute_mean_baseline_advantage)
    rewards = torch.tensor([[0.0, 1.0], [0.0, 3.0]])
    adv, _ = get_adv_estimator_fn(RecipeEstimator.MEAN_BASELINE)(rewards, torch.ones(2, 2))
    assert adv.tolist() == [[-1.0, -1.0], [1.0, 1.0]]
    loss, metrics = get_policy_loss_fn("recipe_reinforce")(
        torch.zeros(2, 2), torch.full((2, 2), -1.0), adv, torch.ones(2, 2)
    )
    assert loss.item() == pytest.approx(0.0) and "actor/pg_loss" in metrics


def test_the_recipe_estimator_runs_in_the_driver_transform():
    from verl.trainer.ppo.ray_trainer import compute_advantage

    batch = _rollout_batch()
    batch.batch["token_level_rewards"] = torch.tensor([[0.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 4.0]])
    out = compute_advantage(batch, RecipeEstimator.MEAN_BASELINE.value, OmegaConf.create({"gamma": 1.0}))
    assert out.batch["advantages"][:, 0].tolist() == [-1.0, 1.0]
    # verl's keyword form, an Enum member, and no response_mask (taken from attention_mask)
    del batch.batch["response_mask"]
    out = compute_advantage(
        batch, adv_estimator=AdvantageEstimator.GRPO, gamma=1.0, lam=1.0, num_repeat=2, norm_adv_by_std_in_grpo=False
    )
    # one response per uid: GRPO keeps the score as it is (group mean 0, std 1 for a single response, as verl)
    assert out.batch["advantages"][:, 0].tolist() == [2.0, 4.0]


def test_recipe_reward_manager_is_built_from_the_config_and_scores():
    cfg = OmegaConf.create(
        {
            "reward_model": {"reward_manager": "recipe_length", "reward_kwargs": {"target_len": 2}},
            "data": {"reward_fn_key": "data_source"},
        }
    )
    manager = load_reward_manager(cfg, _CharTokenizer(), num_examine=0)
    assert isinstance(manager, LengthRewardManager) and manager.target_len == 2
    out = manager(_rollout_batch(), return_dict=True)
    assert out["reward_tensor"].sum(-1).tolist() == [0.0, -2.0] and out["reward_extra_info"]["len"] == [2, 4]


def test_dataproto_helpers_and_metrics():
    batch = _rollout_batch()
    padded, pad = pad_dataproto_to_divisor(batch, 3)
    assert (len(padded), pad) == (3, 1) and len(unpad_dataproto(padded, pad)) == 2
    restored = deserialize_tensordict(serialize_tensordict(batch.batch))
    assert torch.equal(restored["responses"], batch.batch["responses"])
    merged = union_tensor_dict(batch.batch.clone(), batch.select(batch_keys=["prompts"]).batch)
    assert set(merged.keys()) == set(batch.batch.keys())
    loader = DataLoader(batch, batch_size=2, collate_fn=collate_fn)
    assert len(next(iter(loader))) == 2
    assert DataProtoConfig.auto_padding in (True, False)

    batch.batch["token_level_scores"] = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
    batch.batch["advantages"] = torch.zeros(2, 4)
    batch.batch["returns"] = torch.zeros(2, 4)
    metrics = compute_data_metrics(batch, use_critic=False)
    assert metrics["critic/score/mean"] == pytest.approx(0.5) and metrics["response_length/mean"] == 3.0
    timing = compute_timing_metrics(batch, {"gen": 0.5, "step": 1.0})
    assert timing["timing_s/gen"] == 0.5 and "timing_per_token_ms/gen" in timing
    perf = compute_throughout_metrics(batch, {"step": 1.0}, n_gpus=2)
    assert perf["perf/throughput"] == pytest.approx(perf["perf/total_num_tokens"] / 2)

    val = process_validation_metrics(["s"] * 4, ["u"] * 4, {"acc": [1.0, 0.0, 1.0, 1.0], "pred": list("aaba")})
    assert val["s"]["acc"]["mean@4"] == 0.75 and "maj@4/mean" in val["s"]["acc"]
    assert calc_maj_val([{"p": 1, "v": 2}], vote_key="p", val_key="v") == 2
    assert bootstrap_metric([1.0, 1.0], 2, [np.mean]) == [(1.0, 0.0)]


def test_reward_score_modules():
    assert gsm8k.compute_score("... #### 42", "42") == 1.0
    assert math_reward.compute_score("\\boxed{\\frac{1}{2}}", "0.5") == 1.0
    assert math_dapo.compute_score("Answer: 12", "12")["score"] == 1.0
    assert prime_math.compute_score("\\boxed{12}", "12")[0] is True
    assert default_compute_score("aime2025", "Answer: 5", "5")["acc"] is True
    assert callable(sandbox_fusion_compute_score)


class RecipeWorker(Worker):
    """A worker with an N-D mesh, declared the upstream way."""

    def __init__(self):
        self._register_dispatch_collect_info("actor", dp_rank=self.rank, is_collect=True)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def double(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"y": data.batch["responses"] * 2})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def ping(self) -> int:
        return self.rank


def test_recipe_worker_runs_on_a_worker_group():
    from verl.single_controller.local import ClassWithInitArgs, LocalWorkerGroup

    wg = LocalWorkerGroup(ClassWithInitArgs(RecipeWorker), world_size=2)
    try:
        assert wg.ping() == [0, 1]
        out = wg.double(_rollout_batch())
        assert torch.equal(out.batch["y"], _rollout_batch().batch["responses"] * 2)
    finally:
        wg.shutdown()
