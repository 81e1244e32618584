"""Supervised fine-tuning: cross entropy on the response tokens only (the prompt is masked out of the loss)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from omegaconf import DictConfig

from verl.data.sft_dataset import SFTDataset
from verl.models.vlm import processor_for_model, vision_forward_kwargs
from verl.trainer.config.offline_schema import SFTConfig
from verl.trainer.offline.base import OfflineTrainer
from verl.trainer.offline.common import LossOutput, add_stat, autocast
from verl.utils.torch_functional import logprobs_from_logits
from verl.workers.actor.fused_head import output_head
from verl.workers.actor.token_scoring import next_token_logprobs_at

SFT_FUSED_KEY = "model.use_fused_kernels"


def sft_loss(
    logits: torch.Tensor, input_ids: torch.Tensor, loss_mask: torch.Tensor, reduction: str = "mean"
) -> torch.Tensor:
    """Next-token cross entropy over the response tokens only.

    ``loss = -sum_{b,t: loss_mask[b,t]=1} log softmax(logits[b, t-1])[input_ids[b, t]]``, divided by the number of
    such tokens for ``reduction="mean"`` (``"sum"`` returns the sum). Token ``t`` is predicted from the logits at
    position ``t - 1``, so the first token of a sequence is never a target.

    Args:
        logits: ``[batch, seq, vocab]``.
        input_ids: ``[batch, seq]``.
        loss_mask: ``[batch, seq]``, 1 on response tokens, 0 on prompt and padding.
    """
    log_probs = logprobs_from_logits(logits[:, :-1, :], input_ids[:, 1:])
    return sft_loss_from_logprobs(log_probs, loss_mask, reduction)


def sft_loss_from_logprobs(log_probs: torch.Tensor, loss_mask: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """The aggregation of :func:`sft_loss` from the next-token log-probs it computes.

    Args:
        log_probs: ``[batch, seq - 1]``, ``log p(input_ids[b, t + 1] | prefix)`` at position ``t``.
        loss_mask: ``[batch, seq]``, 1 on response tokens (its first column is never a target).
        reduction: ``"sum"`` or ``"mean"`` (over the masked tokens).
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"sft_loss: reduction must be 'mean' or 'sum', got {reduction!r}")
    mask = loss_mask[:, 1:].to(log_probs.dtype)
    total = -(log_probs * mask).sum()
    if reduction == "sum":
        return total
    return total / mask.sum().clamp(min=1.0)


class SFTTrainer(OfflineTrainer):
    """Supervised fine-tuning on ``{prompt, response}`` rows (or ``{messages}`` conversations).

    ``SFTTrainer(model=..., tokenizer=None, dataset=..., max_length=1024).train(num_train_epochs=1,
    per_device_train_batch_size=2, learning_rate=1e-5, output_dir="out")``. Logged: ``loss`` (mean cross
    entropy per response token), ``response_length``, ``grad_norm``, ``lr``, ``epoch``.
    """

    config_schema: ClassVar[type] = SFTConfig

    def __init__(
        self,
        model: torch.nn.Module | str,
        tokenizer: Any = None,
        dataset: Any = None,
        eval_dataset: Any = None,
        max_length: int = 1024,
        max_prompt_length: int | None = None,
        namespace: str | None = None,
        config: dict[str, Any] | DictConfig | None = None,
        processor: Any = None,
    ) -> None:
        # a vision-language model's processor: given, or loaded with a model path (None for text models)
        self.processor = processor
        if processor is None and isinstance(model, str):
            self.processor = processor_for_model(model, tokenizer)
        super().__init__(
            model=model,
            tokenizer=tokenizer,
            dataset=dataset,
            eval_dataset=eval_dataset,
            namespace=namespace,
            config=config,
            overrides={"data.max_length": max_length, "data.max_prompt_length": max_prompt_length},
        )
        # model.use_fused_kernels: the loss through the chunked LM head; a head it cannot handle is refused here,
        # before any step
        self.use_fused_kernels = bool(self.config.model.use_fused_kernels)
        if self.use_fused_kernels:
            output_head(self.model, SFT_FUSED_KEY)

    def _make_dataset(self, source: Any) -> SFTDataset:
        d = self.config.data
        ds = SFTDataset(
            source,
            self.tokenizer,
            max_length=int(d.max_length),
            max_prompt_length=d.max_prompt_length,
            truncation=str(d.truncation),
            prompt_key=str(d.prompt_key),
            response_key=str(d.response_key),
            messages_key=str(d.messages_key),
            prompt_dict_keys=list(d.prompt_dict_keys) if d.get("prompt_dict_keys") else None,
            response_dict_keys=list(d.response_dict_keys) if d.get("response_dict_keys") else None,
            apply_chat_template=d.apply_chat_template,
            processor=self.processor,
            image_key=d.image_key,
        )
        return ds

    def _micro_batches(self, items: Sequence[dict[str, Any]], dataset: Any) -> list[dict[str, torch.Tensor]]:
        """``micro_batch_size_per_gpu`` rows at a time, or with ``data.use_dynamic_bsz`` groups of at most
        ``data.max_token_len_per_gpu`` tokens (:func:`~verl.utils.seqlen_balancing.rearrange_micro_batches`: balanced
        partitions, the same count on every rank). The step's loss is divided by its token count either way, so the
        gradient does not depend on how the rows are grouped."""
        d = self.config.data
        if not ("use_dynamic_bsz" in d and d.use_dynamic_bsz) or not items:  # GKD's data section has no such key
            return super()._micro_batches(items, dataset)
        from tensordict import TensorDict

        from verl.utils.seqlen_balancing import rearrange_micro_batches

        lengths = torch.tensor([len(it["input_ids"]) for it in items])
        mask = (torch.arange(int(lengths.max()))[None, :] < lengths[:, None]).long()
        _, parts = rearrange_micro_batches(
            TensorDict({"attention_mask": mask}, batch_size=[len(items)]), int(d.max_token_len_per_gpu)
        )
        return [self._collate([items[i] for i in part], dataset) for part in parts]

    def _drops_last_batch(self) -> bool:
        d = self.config.data
        return super()._drops_last_batch() or ("drop_last" in d and bool(d.drop_last))  # GKD's data has no key

    def _count_units(self, batch: dict[str, torch.Tensor]) -> float:
        return float(batch["loss_mask"][:, 1:].sum().item())

    def _compute_loss(self, batch: dict[str, torch.Tensor]) -> LossOutput:
        """The summed cross entropy of the loss tokens: the LM head runs at the positions that predict them only
        (:func:`~verl.workers.actor.token_scoring.next_token_logprobs_at`), on packed rows with
        ``model.use_remove_padding``, through the chunked head with ``model.use_fused_kernels``."""
        extra = None
        if "multi_modal_inputs" in batch:  # images of a vision-language batch, row by row
            extra = vision_forward_kwargs(
                self.model, batch["input_ids"], batch["attention_mask"], batch["multi_modal_inputs"]
            )
        targets = batch["loss_mask"].bool()
        scored = torch.zeros_like(targets)
        scored[:, :-1] = targets[:, 1:]  # position t predicts token t + 1
        with autocast(self.device, self.compute_dtype):
            out = next_token_logprobs_at(
                self.model, batch["input_ids"], batch["attention_mask"], batch["position_ids"], scored,
                pack=self.use_remove_padding, fused=self.use_fused_kernels, extra_inputs=extra,
                fused_key=SFT_FUSED_KEY,
            )  # fmt: skip
        loss_sum = -out.log_probs.float().sum()
        lengths = batch["loss_mask"][:, 1:].sum(-1)
        stats: dict[str, tuple[float, float]] = {"loss": (float(loss_sum.detach().item()), float(lengths.sum().item()))}
        add_stat(stats, "response_length", lengths)
        return LossOutput(loss_sum=loss_sum, stats=stats)


def run_sft(config: DictConfig) -> dict[str, float]:
    """Train from a full ``sft_trainer`` config (the CLI's run function)."""
    return SFTTrainer.from_config(config).fit()
