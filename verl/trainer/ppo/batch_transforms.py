"""Driver-side transforms of a scored rollout batch: KL in the reward, advantages, DAPO group filtering.

Pure functions of a DataProto (no worker calls), re-exported from ``verl.trainer.ppo.ray_trainer`` where verl
users import them.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from verl.algorithms import core_algos
from verl.algorithms.pf_ppo import compute_pf_ppo_reweight_data
from verl.algorithms.registry import call_with_supported_kwargs
from verl.base_config import omega_conf_to_dataclass
from verl.protocol import DataProto
from verl.trainer.config.schema import AlgorithmConfig
from verl.utils.torch_functional import masked_mean


def apply_kl_penalty(
    data: DataProto, kl_ctrl: core_algos.AdaptiveKLController | core_algos.FixedKLController, kl_penalty: str = "kl"
) -> tuple[DataProto, dict[str, float]]:
    """token_level_rewards = token_level_scores - beta * KL(old || ref) per token, then update the KL controller.

    Shapes: all tensors ``[batch, response_len]``. The controller sees the batch mean of the per-sequence mean KL
    (Ziegler et al. 2019).
    """
    response_mask = data.batch["response_mask"]
    kld = core_algos.kl_penalty(data.batch["old_log_probs"], data.batch["ref_log_prob"], kl_penalty) * response_mask
    beta = kl_ctrl.value
    data.batch["token_level_rewards"] = data.batch["token_level_scores"] - beta * kld
    current_kl = masked_mean(kld, response_mask, axis=-1).mean().item()
    kl_ctrl.update(current_kl=current_kl, n_steps=len(data))
    return data, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}


def apply_distillation_reward(
    data: DataProto,
    coef: float,
    task_reward_weight: float = 1.0,
    loss_mode: str = "k1",
    loss_max_clamp: float | None = None,
) -> tuple[DataProto, dict[str, float]]:
    """On-policy distillation as a dense reward (``distillation`` section): ``token_level_scores <-
    task_reward_weight * token_level_scores - coef * (old_log_probs - teacher_log_prob)`` on response tokens.

    Shapes: all ``[batch, response_len]``. ``old_log_probs`` are the actor's log-probs of its own sampled tokens, so
    the added term summed over a response is a one-sample estimate of ``-coef * KL(actor || teacher)``
    (:func:`verl.algorithms.distillation.reverse_kl_token_rewards`). Metrics: ``distill/reverse_kl`` (mean per
    response token), ``distill/reward`` (mean per-sequence sum of the added term) and
    ``distill/task_score/{mean,max,min}`` (the task reward alone, before weighting: ``critic/score/*`` holds the
    mixed score afterwards, so task accuracy is read here). ``loss_mode`` and ``loss_max_clamp``
    (``distillation.distillation_loss``, upstream v0.9) replace the k1 term by another per-token estimator, clamped
    (:func:`verl.algorithms.distillation.estimator_token_rewards`). With several teachers (a ``teacher_name``
    column from the teacher worker) the first two also per teacher, ``distill/<name>/{reverse_kl,reward,rows}``.
    """
    from verl.algorithms.distillation import estimator_token_rewards

    for key in ("old_log_probs", "teacher_log_prob", "token_level_scores"):
        if key not in data.batch.keys():
            raise ValueError(f"distillation reward needs {key!r} in the batch; keys: {sorted(data.batch.keys())}")
    mask = data.batch["response_mask"]
    student, teacher = data.batch["old_log_probs"], data.batch["teacher_log_prob"].to(mask.device)
    dense = estimator_token_rewards(student, teacher, mask, coef, loss_mode, loss_max_clamp)
    scores = data.batch["token_level_scores"]
    task = scores.sum(-1).float()
    data.batch["token_level_scores"] = task_reward_weight * scores + dense.to(scores.dtype)
    metrics = {
        "distill/reverse_kl": masked_mean(student - teacher, mask).item(),
        "distill/reward": dense.sum(-1).mean().item(),
        "distill/task_score/mean": task.mean().item(),
        "distill/task_score/max": task.max().item(),
        "distill/task_score/min": task.min().item(),
    }
    names = data.non_tensor_batch.get("teacher_name")  # several teachers: the teacher of each row
    if names is not None:
        per_seq = dense.sum(-1)
        for name in sorted({str(n) for n in names}):
            rows = torch.as_tensor([str(n) == name for n in names], device=mask.device)
            metrics[f"distill/{name}/reverse_kl"] = masked_mean((student - teacher)[rows], mask[rows]).item()
            metrics[f"distill/{name}/reward"] = per_seq[rows].mean().item()
            metrics[f"distill/{name}/rows"] = int(rows.sum().item())
    return data, metrics


def compute_response_mask(data: DataProto) -> torch.Tensor:
    """``[batch, response_len]``: the response part of ``attention_mask`` (verl's helper)."""
    response_length = data.batch["responses"].shape[-1]
    return data.batch["attention_mask"][:, -response_length:]


def compute_advantage(
    data: DataProto,
    adv_estimator: Any,
    algorithm_config: DictConfig | None = None,
    *,
    gamma: float | None = None,
    lam: float | None = None,
    num_repeat: int = 1,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: DictConfig | None = None,
) -> DataProto:
    """Fill ``advantages`` and ``returns`` ``[batch, response_len]`` with the registered estimator ``adv_estimator``
    (a name or an ``AdvantageEstimator`` / recipe Enum member).

    Every estimator is called by keyword with what it may need: ``token_level_rewards``, ``response_mask``,
    ``index`` (the ``uid`` group ids), ``values``, ``gamma``, ``lam``, ``norm_adv_by_std_in_grpo``,
    ``reward_baselines`` and ``config``; a user estimator receives the subset its signature names. verl's keyword
    form ``compute_advantage(data, adv_estimator=..., gamma=..., lam=..., num_repeat=...,
    norm_adv_by_std_in_grpo=..., config=...)`` works too: explicit keywords win over ``algorithm.*`` values, and
    ``num_repeat`` is accepted for that signature (the groups come from ``uid``). A missing ``response_mask`` is
    taken from ``attention_mask``.
    """
    # typed: keys the caller left out take AlgorithmConfig's defaults; a user's +keys stay readable by estimators
    algorithm_config = omega_conf_to_dataclass(
        algorithm_config if algorithm_config is not None else config, AlgorithmConfig
    )
    del num_repeat
    fn = core_algos.get_adv_estimator_fn(adv_estimator)
    if "response_mask" not in data.batch.keys():
        data.batch["response_mask"] = compute_response_mask(data)
    kwargs: dict[str, Any] = {
        "token_level_rewards": data.batch["token_level_rewards"],
        "response_mask": data.batch["response_mask"],
        "index": data.non_tensor_batch["uid"],
        "gamma": float(gamma if gamma is not None else algorithm_config.gamma),
        "lam": float(lam if lam is not None else algorithm_config.lam),
        "norm_adv_by_std_in_grpo": bool(
            norm_adv_by_std_in_grpo if norm_adv_by_std_in_grpo is not None else algorithm_config.norm_adv_by_std_in_grpo
        ),
        "config": algorithm_config,
    }
    if "values" in data.batch.keys():
        kwargs["values"] = data.batch["values"]
    if "reward_baselines" in data.batch.keys():
        kwargs["reward_baselines"] = data.batch["reward_baselines"]
    kwargs.update(_named_batch_inputs(fn, data))
    advantages, returns = call_with_supported_kwargs(fn, **kwargs)
    data.batch["advantages"] = advantages
    data.batch["returns"] = returns
    # PF-PPO resamples after GAE only, as upstream (the config check refuses use_pf_ppo with other estimators)
    if algorithm_config.use_pf_ppo and getattr(adv_estimator, "value", adv_estimator) == "gae":
        pf = algorithm_config.pf_ppo
        data = compute_pf_ppo_reweight_data(data, str(pf.reweight_method), float(pf.weight_pow))
    return data


# Inputs an estimator receives only when its signature names them (upstream passes them to gdpo and the optimal token
# baselines): the raw batch for per-component rewards, the old-log-prob pass's outputs for the token baselines, SPO's
# tracked prompt values.
_NAMED_TENSOR_INPUTS = ("old_log_probs", "sum_pi_squared", "rollout_is_weights", "spo_values")


def _named_batch_inputs(fn: Any, data: DataProto) -> dict[str, Any]:
    """``non_tensor_batch``, ``batch`` and the ``_NAMED_TENSOR_INPUTS`` columns present in ``data``, for the ones
    ``fn`` names as parameters (a ``**kwargs`` catch-all does not count, so older estimators see nothing new)."""
    params = inspect.signature(fn).parameters
    named = {k for k, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
    inputs: dict[str, Any] = {}
    if "non_tensor_batch" in named:
        inputs["non_tensor_batch"] = data.non_tensor_batch
    if "batch" in named:
        inputs["batch"] = data.batch
    for key in _NAMED_TENSOR_INPUTS:
        if key in named and key in data.batch.keys():
            inputs[key] = data.batch[key]
    return inputs


def filter_uniform_groups(data: DataProto, metric_values: np.ndarray) -> tuple[DataProto, int]:
    """DAPO dynamic sampling: drop every group (same ``uid``) whose responses all have the same metric value.

    Such groups have zero advantage under group baselines and only dilute the batch. Returns the kept rows and the
    number of kept groups.
    """
    uids = data.non_tensor_batch["uid"]
    by_uid: dict[Any, list[float]] = {}
    for uid, value in zip(uids, metric_values):
        by_uid.setdefault(uid, []).append(float(value))
    kept = {uid for uid, values in by_uid.items() if np.std(values) > 0 or len(values) == 1}
    keep_idx = [i for i, uid in enumerate(uids) if uid in kept]
    return data[keep_idx], len(kept)
