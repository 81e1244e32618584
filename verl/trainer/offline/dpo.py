"""Direct preference optimisation (Rafailov et al., 2023) and its IPO / hinge variants, on paired preferences."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from omegaconf import DictConfig

from verl.algorithms.preference import DPO_LOSS_TYPES, dpo_loss  # noqa: F401  (re-exported: the trainer's loss)
from verl.data.preference_dataset import PreferenceDataset
from verl.trainer.config.offline_schema import DPOConfig
from verl.trainer.offline.base import OfflineTrainer
from verl.trainer.offline.common import LossOutput, add_stat, sequence_log_probs


class DPOTrainer(OfflineTrainer):
    """DPO on ``{prompt, chosen, rejected}`` rows (strings or chat messages).

    ``DPOTrainer(model=..., tokenizer=None, dataset=..., beta=0.1, max_length=1024).train(...)``. The reference is
    a frozen copy of the model (``ref_model=`` to pass one), unless the dataset has ``ref_chosen_logps`` /
    ``ref_rejected_logps`` columns or ``precompute_ref_log_probs=True`` computes them once before training.
    Logged: ``loss``, ``rewards/chosen``, ``rewards/rejected``, ``rewards/accuracies``, ``rewards/margins``,
    ``logps/chosen``, ``logps/rejected``, ``grad_norm``, ``lr``, ``epoch``.
    """

    config_schema: ClassVar[type] = DPOConfig
    uses_reference: ClassVar[bool] = True
    reference_keys: ClassVar[tuple[str, str]] = ("ref_chosen_logps", "ref_rejected_logps")

    def __init__(
        self,
        model: torch.nn.Module | str,
        tokenizer: Any = None,
        dataset: Any = None,
        eval_dataset: Any = None,
        beta: float = 0.1,
        max_length: int = 1024,
        max_prompt_length: int | None = None,
        loss_type: str = "sigmoid",
        label_smoothing: float = 0.0,
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
                "loss_type": loss_type,
                "label_smoothing": float(label_smoothing),
                "data.max_length": max_length,
                "data.max_prompt_length": max_prompt_length,
                "ref.precompute_ref_log_probs": bool(precompute_ref_log_probs),
            },
        )

    def _make_dataset(self, source: Any) -> PreferenceDataset:
        d = self.config.data
        return PreferenceDataset(
            source,
            self.tokenizer,
            max_length=int(d.max_length),
            max_prompt_length=d.max_prompt_length,
            truncation=str(d.truncation),
            prompt_key=str(d.prompt_key),
            chosen_key=str(d.chosen_key),
            rejected_key=str(d.rejected_key),
        )

    def _count_units(self, batch: dict[str, torch.Tensor]) -> float:
        return float(batch["input_ids"].shape[0] // 2)

    def _pair_logps(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Chosen and rejected sequence log-probs ``[batch]`` from one forward over the ``[2 * batch]`` rows."""
        logps = sequence_log_probs(model, batch, self.device, self.compute_dtype, self.use_remove_padding)
        n = logps.shape[0] // 2
        return logps[:n], logps[n:]

    # The reference scores the same chosen/rejected pair as the policy.
    _reference_pair_logps = _pair_logps

    def _compute_loss(self, batch: dict[str, torch.Tensor]) -> LossOutput:
        policy_chosen, policy_rejected = self._pair_logps(self.model, batch)
        ref_chosen, ref_rejected = self._reference_logps(batch)
        losses, chosen_rewards, rejected_rewards = dpo_loss(
            policy_chosen,
            policy_rejected,
            ref_chosen.to(policy_chosen.dtype),
            ref_rejected.to(policy_rejected.dtype),
            beta=float(self.config.beta),
            loss_type=str(self.config.loss_type),
            label_smoothing=float(self.config.label_smoothing),
        )
        stats: dict[str, tuple[float, float]] = {}
        add_stat(stats, "loss", losses)
        add_stat(stats, "rewards/chosen", chosen_rewards)
        add_stat(stats, "rewards/rejected", rejected_rewards)
        add_stat(stats, "rewards/accuracies", (chosen_rewards > rejected_rewards).float())
        add_stat(stats, "rewards/margins", chosen_rewards - rejected_rewards)
        add_stat(stats, "logps/chosen", policy_chosen)
        add_stat(stats, "logps/rejected", policy_rejected)
        return LossOutput(loss_sum=losses.sum(), stats=stats)


def run_dpo(config: DictConfig) -> dict[str, float]:
    """Train from a full ``dpo_trainer`` config (the CLI's run function)."""
    return DPOTrainer.from_config(config).fit()
