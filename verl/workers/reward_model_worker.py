"""The reward-model worker: a sequence classifier scoring (prompt, response) pairs (verl's ``RewardModelWorker``)."""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

from verl.hardware.precision import resolve_dtype
from verl.protocol import DataProto
from verl.protocol.rollout_text import rollout_texts, valid_response_lengths
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils.device import get_device_name, get_torch_device, init_distributed_if_needed
from verl.utils.padding import pack_padded_batch, varlen_attention
from verl.workers.config import RewardModelConfig
from verl.workers.fsdp_setup import (
    private_section,
    set_torch_threads,
)
from verl.workers.reward_model_budget import (
    ScoringBudget,
    attention_bytes_per_token,
    device_memory_bytes,
    estimated_bytes_per_token,
    measured_peak,
    module_bytes,
)


class RewardModelWorker(Worker):
    """A sequence classifier that scores (prompt, response) pairs. ``config`` is the ``reward_model`` section.

    The score of a sequence is the classifier output at its last valid token, written at the last valid response
    position of ``rm_scores`` ``[batch, response_len]``. When the policy's tokenizer differs from the reward
    model's, responses are decoded and re-tokenised with the reward model's own tokenizer (and chat template).
    """

    def __init__(self, config: Any):
        super().__init__()
        set_torch_threads()
        self.config = private_section(config, RewardModelConfig)
        self.device_name = get_device_name(os.environ.get("VERL_DEVICE", "auto"))
        init_distributed_if_needed(self.device_name)
        self.compute_device = get_torch_device(self.device_name)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        from verl.models.loader import load_sequence_classifier, load_tokenizer, resolve_model_path

        share = self.config.gpu_memory_utilization
        own_pool = bool(self.config.enable_resource_pool)
        if share is not None and own_pool and self.compute_device.type == "cuda":
            # a process of its own: the share is also its CUDA cap (colocated, the cap would bind the actor too)
            torch.cuda.set_per_process_memory_fraction(float(share), self.compute_device)
        path = resolve_model_path(self.config.model.path)
        self.tokenizer = load_tokenizer(path)
        input_tok = self.config.model.input_tokenizer
        self.input_tokenizer = load_tokenizer(input_tok) if input_tok else None
        self.module = load_sequence_classifier(path, dtype=torch.float32).eval()
        self.module.requires_grad_(False)
        if self.config.model.use_remove_padding:
            self._score_head()  # fails here, at start, for a classifier whose head is not reachable
        # the weights' footprint and the activations of each micro-batch within the share (reward_model_budget.py)
        self.budget = None if share is None else self._budget(float(share))
        # model.fsdp_config.param_offload: the weights wait in CPU memory and visit the device while scoring; so they
        # do with a share when colocated, as upstream's colocated reward server sleeps while the actor trains
        offload = bool(self.config.model.fsdp_config.param_offload) or (share is not None and not own_pool)
        self.offload = offload and self.compute_device.type != "cpu"
        if not self.offload:
            self.module.to(self.compute_device)

    def _budget(self, share: float) -> ScoringBudget:
        """The scoring budget of ``share`` of this rank's device (its RAM on CPU); fails when the weights exceed it."""
        model_config = self.module.config
        dtype = resolve_dtype(str(self.config.dtype), self.compute_device)
        budget = ScoringBudget(
            share,
            total=device_memory_bytes(self.compute_device),
            weights=module_bytes(self.module),
            base_estimate=estimated_bytes_per_token(model_config, dtype),
            width_term=functools.partial(attention_bytes_per_token, model_config),
            max_rows=int(self.config.micro_batch_size_per_gpu),
            measured=self.compute_device.type == "cuda",
        )
        budget.check_weights(self.compute_device)
        return budget

    def _score_head(self) -> torch.nn.Module:
        """The classifier's head (``score`` in transformers' ``*ForSequenceClassification``, ``classifier`` in some
        others): packed scoring runs the base model over all tokens and this head at each sequence's last token."""
        head = getattr(self.module, "score", None) or getattr(self.module, "classifier", None)
        if not isinstance(head, torch.nn.Module):
            raise ValueError(
                f"reward_model.model.use_remove_padding=true: {type(self.module).__name__} has no `score` or "
                "`classifier` head to apply at each packed sequence's last token; set use_remove_padding=false"
            )
        return head

    def _last_scored_tokens(self, packed: Any) -> torch.Tensor:
        """``[bs]`` index (in the packed token order) of the token each sequence is scored at: its last token that is
        not the classifier's
        ``pad_token_id``, as transformers' sequence classifiers pick it on padded rows (so a response ending in an
        EOS that doubles as the pad token is read where the padded path reads it); its last token if all are pad."""
        starts, ends = packed.cu_seqlens[:-1].long(), packed.cu_seqlens[1:].long()
        pad_id = getattr(self.module.config, "pad_token_id", None)  # transformers' config
        if pad_id is None:
            return ends - 1
        tokens = packed.tokens(packed.input_ids)  # [total] in sequence order, whatever the rows' layout
        sequence = torch.repeat_interleave(torch.arange(len(starts), device=starts.device), ends - starts)
        index = torch.arange(tokens.numel(), device=starts.device)
        scored = torch.where(tokens != pad_id, index, torch.full_like(index, -1))
        last = torch.full((len(starts),), -1, dtype=torch.long, device=starts.device)
        last = last.scatter_reduce(0, sequence, scored, reduce="amax")
        return torch.where(last >= starts, last, ends - 1)

    def _score_packed(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``model.use_remove_padding``: the valid tokens of ``[bs, seqlen]`` rows packed (positions restart per
        sequence, so attention stays within each; rows as wide as the longest sequence, or one row for
        flash-attention's varlen kernels: :mod:`verl.utils.padding`), the head read at each sequence's last token:
        ``[bs]``, the padded path's scores without computing the padding."""
        packed = pack_padded_batch(ids, mask, into_rows=not varlen_attention(self.module))
        # use_cache=False: a KV cache turns off transformers' detection of the packed sequences (verl/utils/padding.py)
        out = self.module.base_model(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False)
        hidden = packed.tokens(out[0])  # [total, H] in sequence order
        last = self._last_scored_tokens(packed)
        return self._score_head()(hidden[last])[:, 0].float()

    def _score_micro(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Classifier output at the last valid token of each row of one micro-batch ``[n, seqlen]``: ``[n]``."""
        dtype = resolve_dtype(str(self.config.dtype), self.compute_device)
        with torch.autocast(self.compute_device.type, dtype=dtype, enabled=dtype != torch.float32):
            if self.config.model.use_remove_padding:
                return self._score_packed(ids, mask)
            position_ids = (mask.long().cumsum(-1) - 1).clamp(min=0)
            logits = self.module(input_ids=ids, attention_mask=mask, position_ids=position_ids).logits
        if logits.dim() == 2:
            return logits[:, 0].float()
        last = (mask * torch.arange(mask.shape[1], device=mask.device)).argmax(-1)
        return logits[torch.arange(ids.shape[0], device=ids.device), last, 0].float()

    def _score_rows(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Classifier output at the last valid token of each row: ``[batch]``. Micro-batches of
        ``micro_batch_size_per_gpu`` rows, or, with ``gpu_memory_utilization``, as many rows as the share's
        activation bytes hold (:class:`ScoringBudget`; a row costs its valid tokens when packed, else the width)."""
        micro = int(self.config.micro_batch_size_per_gpu)
        batch, width = input_ids.shape
        if self.budget is not None:
            packed = self.config.model.use_remove_padding
            row_tokens = attention_mask.sum(-1).tolist() if packed else [width] * batch
        scores, start = [], 0
        while start < batch:
            if self.budget is None:
                rows = micro
                scores.append(self._score_micro(input_ids[start : start + rows], attention_mask[start : start + rows]))
            else:
                rows = self.budget.next_rows(row_tokens[start:], width)
                ids, mask = input_ids[start : start + rows], attention_mask[start : start + rows]
                out, peak = measured_peak(self.compute_device, lambda: self._score_micro(ids, mask))  # noqa: B023
                if peak is not None:
                    self.budget.observe(sum(row_tokens[start : start + rows]), width, peak)
                scores.append(out)
            start += rows
        return torch.cat(scores)

    def _retokenize(self, data: DataProto) -> tuple[torch.Tensor, torch.Tensor]:
        texts = []
        # the text every reward sees (verl.protocol.rollout_text): tool and user turns of a multi-turn row included
        for prompt, response in zip(*rollout_texts(self.input_tokenizer, data)):
            chat = [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
            if getattr(self.tokenizer, "chat_template", None):
                texts.append(self.tokenizer.apply_chat_template(chat, tokenize=False))
            else:
                texts.append(prompt + response)
        max_length = self.config.max_length or None
        enc = self.tokenizer(
            texts, return_tensors="pt", padding=True, truncation=max_length is not None, max_length=max_length
        )
        return enc["input_ids"].to(self.compute_device), enc["attention_mask"].to(self.compute_device)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_rm_score(self, data: DataProto) -> DataProto:
        data = data.to(self.compute_device)
        if self.input_tokenizer is not None and self.input_tokenizer.get_vocab() != self.tokenizer.get_vocab():
            input_ids, attention_mask = self._retokenize(data)
        else:
            input_ids, attention_mask = data.batch["input_ids"], data.batch["attention_mask"]
        if self.offload:
            self.module.to(self.compute_device)
        try:
            with torch.no_grad():
                scores = self._score_rows(input_ids, attention_mask)
        finally:
            if self.offload:
                self.module.to("cpu")
        response_mask = data.batch["response_mask"]
        rm_scores = torch.zeros_like(response_mask, dtype=torch.float32)
        # the last valid response token (of a multi-turn row: of its last turn), where the reward managers score
        last = (valid_response_lengths(data) - 1).clamp(min=0)
        rm_scores[torch.arange(rm_scores.shape[0], device=rm_scores.device), last] = scores
        return DataProto.from_dict(tensors={"rm_scores": rm_scores}).to("cpu")
