"""Kahneman-Tversky optimisation (Ethayarajh et al., 2024) on unpaired desirable / undesirable completions."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.distributed as dist
from omegaconf import DictConfig

from verl.data.preference_dataset import KTODataset
from verl.trainer.config.offline_schema import KTOConfig
from verl.trainer.offline.base import OfflineTrainer
from verl.trainer.offline.common import LossOutput, add_stat, sequence_log_probs

_SEQ_KEYS = ("input_ids", "attention_mask", "position_ids", "loss_mask")


def kto_kl_estimate(policy_kl_logps: torch.Tensor, ref_kl_logps: torch.Tensor) -> torch.Tensor:
    """The KTO reference point ``z0 = max(0, mean(log pi(y'|x) - log ref(y'|x)))`` (a detached scalar).

    ``policy_kl_logps`` / ``ref_kl_logps`` are ``[batch]`` sequence log-probs of *mismatched* prompt/completion
    pairs ``(x, y')``, whose mean log-ratio estimates ``KL(pi || ref)`` (Ethayarajh et al. 2024, section 4.1);
    no gradient flows through ``z0``.
    """
    return (policy_kl_logps - ref_kl_logps).detach().float().mean().clamp(min=0.0)


def kto_loss(
    policy_logps: torch.Tensor,
    ref_logps: torch.Tensor,
    labels: torch.Tensor,
    kl: torch.Tensor | float,
    beta: float,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-example KTO losses (Ethayarajh et al. 2024, eq. 8) and implicit rewards.

    With ``r = log pi(y|x) - log ref(y|x)`` and reference point ``z0 = kl``:
    desirable (``labels`` True): ``lambda_D * (1 - sigma(beta * (r - z0)))``;
    undesirable: ``lambda_U * (1 - sigma(beta * (z0 - r)))``.

    Args:
        policy_logps / ref_logps: ``[batch]`` sequence log-probs of the matched completions.
        labels: ``[batch]`` bool, True for desirable.
        kl: the scalar ``z0`` (see :func:`kto_kl_estimate`).

    Returns:
        ``(losses [batch], rewards [batch])`` with ``rewards = beta * r`` (detached).
    """
    if beta <= 0:
        raise ValueError(f"kto_loss: beta must be > 0, got {beta}")
    labels = labels.to(torch.bool)
    ratio = policy_logps - ref_logps
    z0 = torch.as_tensor(kl, dtype=ratio.dtype, device=ratio.device)
    desirable = desirable_weight * (1.0 - torch.sigmoid(beta * (ratio - z0)))
    undesirable = undesirable_weight * (1.0 - torch.sigmoid(beta * (z0 - ratio)))
    losses = torch.where(labels, desirable, undesirable)
    return losses, beta * ratio.detach()


def _rows(batch: dict[str, torch.Tensor], start: int, end: int) -> dict[str, torch.Tensor]:
    return {k: batch[k][start:end] for k in _SEQ_KEYS}


class KTOTrainer(OfflineTrainer):
    """KTO on ``{prompt, completion, label}`` rows (label True = desirable).

    ``KTOTrainer(model=..., dataset=..., beta=0.1, desirable_weight=1.0, undesirable_weight=1.0).train(...)``.
    Each row's KL pair is the next row's completion after this row's prompt (see ``KTODataset``). Logged:
    ``loss``, ``kl`` (z0), ``rewards/chosen`` / ``rewards/rejected`` (mean implicit reward of desirable /
    undesirable rows), ``rewards/margins`` (their difference), ``rewards/accuracies`` (fraction of rows on the
    side of ``z0`` their label asks for), ``logps/chosen``, ``logps/rejected``, ``grad_norm``, ``lr``, ``epoch``.
    """

    config_schema: ClassVar[type] = KTOConfig
    uses_reference: ClassVar[bool] = True
    reference_keys: ClassVar[tuple[str, str]] = ("ref_logps", "ref_kl_logps")

    def __init__(
        self,
        model: torch.nn.Module | str,
        tokenizer: Any = None,
        dataset: Any = None,
        eval_dataset: Any = None,
        beta: float = 0.1,
        desirable_weight: float = 1.0,
        undesirable_weight: float = 1.0,
        max_length: int = 1024,
        max_prompt_length: int | None = None,
        ref_model: torch.nn.Module | None = None,
        precompute_ref_log_probs: bool = False,
        namespace: str | None = None,
        config: dict[str, Any] | DictConfig | None = None,
    ) -> None:
        super().__init__(
            model=model,
            tokenizer=tokenizer,
            dataset=dataset,
            eval_dataset=eval_dataset,
            namespace=namespace,
            config=config,
            ref_model=ref_model,
            overrides={
                "beta": float(beta),
                "desirable_weight": float(desirable_weight),
                "undesirable_weight": float(undesirable_weight),
                "data.max_length": max_length,
                "data.max_prompt_length": max_prompt_length,
                "ref.precompute_ref_log_probs": bool(precompute_ref_log_probs),
            },
        )

    def _make_dataset(self, source: Any) -> KTODataset:
        d = self.config.data
        return KTODataset(
            source,
            self.tokenizer,
            max_length=int(d.max_length),
            max_prompt_length=d.max_prompt_length,
            truncation=str(d.truncation),
            prompt_key=str(d.prompt_key),
            completion_key=str(d.completion_key),
            label_key=str(d.label_key),
        )

    def _count_units(self, batch: dict[str, torch.Tensor]) -> float:
        return float(batch["label"].shape[0])

    def _logps(self, model: torch.nn.Module, batch: dict[str, torch.Tensor], kl_rows: bool) -> torch.Tensor:
        n = batch["label"].shape[0]
        part = _rows(batch, n, 2 * n) if kl_rows else _rows(batch, 0, n)
        return sequence_log_probs(model, part, self.device, self.compute_dtype, self.use_remove_padding)

    def _reference_pair_logps(
        self, model: torch.nn.Module, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs ``[batch]`` of each row's completion and of its KL pair (next row's completion)."""
        return self._logps(model, batch, False), self._logps(model, batch, True)

    def _compute_loss(self, batch: dict[str, torch.Tensor]) -> LossOutput:
        labels = batch["label"]
        policy_logps = self._logps(self.model, batch, False)
        with torch.no_grad():
            policy_kl_logps = self._logps(self.model, batch, True)
        ref_logps, ref_kl_logps = self._reference_logps(batch)
        ref_logps = ref_logps.to(policy_logps.dtype)
        z0 = kto_kl_estimate(policy_kl_logps, ref_kl_logps.to(policy_kl_logps.dtype))
        if self.world_size > 1 and torch.is_grad_enabled():
            # The reference point is one number for the whole batch: average the ranks' estimates (training only,
            # where every rank runs the same number of micro-batches).
            z0 = z0.clone()
            dist.all_reduce(z0)
            z0 = z0 / self.world_size
        losses, rewards = kto_loss(
            policy_logps,
            ref_logps,
            labels,
            z0,
            beta=float(self.config.beta),
            desirable_weight=float(self.config.desirable_weight),
            undesirable_weight=float(self.config.undesirable_weight),
        )
        beta_z0 = float(self.config.beta) * z0
        stats: dict[str, tuple[float, float]] = {}
        add_stat(stats, "loss", losses)
        add_stat(stats, "kl", z0.reshape(1))
        add_stat(stats, "rewards/chosen", rewards[labels])
        add_stat(stats, "rewards/rejected", rewards[~labels])
        add_stat(stats, "rewards/accuracies", torch.where(labels, rewards > beta_z0, rewards < beta_z0).float())
        add_stat(stats, "logps/chosen", policy_logps.detach()[labels])
        add_stat(stats, "logps/rejected", policy_logps.detach()[~labels])
        return LossOutput(loss_sum=losses.sum(), stats=stats)

    def _reduce_stats(self, stats: dict[str, tuple[float, float]]) -> dict[str, float]:
        metrics = super()._reduce_stats(stats)
        if "rewards/chosen" in metrics and "rewards/rejected" in metrics:
            metrics["rewards/margins"] = metrics["rewards/chosen"] - metrics["rewards/rejected"]
        return metrics


def run_kto(config: DictConfig) -> dict[str, float]:
    """Train from a full ``kto_trainer`` config (the CLI's run function)."""
    return KTOTrainer.from_config(config).fit()
