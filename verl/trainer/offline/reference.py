"""The reference policy of the preference trainers (DPO, KTO), a part of
:class:`~verl.trainer.offline.base.OfflineTrainer`.

Reference log-probs come, in order of preference, from the dataset's own columns (``reference_keys``), from a pass
over the dataset before training (``ref.precompute_ref_log_probs``), from the LoRA policy with its adapters disabled,
or from a frozen reference model kept for the loss to call (``ref.path``, the model path, or a copy of the still
untrained policy).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import torch

from verl.models.loader import load_causal_lm


class ReferencePolicyMixin:
    """Where the reference log-probs of a preference loss come from, and the frozen reference model if one is kept.

    A subclass names ``reference_keys`` (the two reference log-prob columns) and implements
    :meth:`_reference_pair_logps`.
    """

    reference_keys: tuple[str, str]
    fsdp_mesh: Any  # the trainer's sharding mesh (None: all ranks)

    def _needs_live_reference(self) -> bool:
        """A reference model is kept when some dataset lacks reference log-probs and they are not precomputed (and
        the reference is not the LoRA policy's own base)."""
        if self.config.ref.precompute_ref_log_probs or self._lora_reference:
            return False
        datasets = [d for d in (self.train_dataset, self.eval_dataset) if d is not None]
        return not datasets or any(not d.has_reference for d in datasets)

    def _build_reference(self) -> torch.nn.Module:
        """The frozen reference: ``ref.path``, else the model path, else a copy of the (still initial) policy."""
        path = self.config.ref.path or self._model_path
        if path is not None:
            return load_causal_lm(
                str(path), dtype=torch.float32, trust_remote_code=bool(self.config.model.trust_remote_code)
            )
        if not self._policy_is_initial:
            raise ValueError(
                "reference log-probs are needed but the policy has been trained already and there is no reference "
                "model: pass ref_model=, set ref.path, or add reference log-prob columns to the dataset"
            )
        return copy.deepcopy(self.model)

    def _prepare_frozen(self, module: torch.nn.Module) -> torch.nn.Module:
        module.requires_grad_(False)
        module.eval()
        module.to(self.device)
        if self.world_size > 1:
            from verl.utils.fsdp_utils import apply_fsdp2, is_fsdp_module

            if not is_fsdp_module(module):
                apply_fsdp2(module, mesh=self.fsdp_mesh)  # the policy's layout (model.fsdp_size)
        return module

    def _ensure_reference(self, dataset: Any) -> None:
        """Make sure reference log-probs for ``dataset`` will be available.

        With ``ref.precompute_ref_log_probs`` they are computed once now and stored in the dataset (by the given
        ``ref_model``, else by the policy itself while it is still untrained, else by a reference loaded for the
        occasion); otherwise a frozen reference model is kept for the loss to call. With LoRA (and no other
        reference) the reference is the policy with its adapters disabled, at any point of training.
        """
        if not self.uses_reference or dataset.has_reference:
            return
        if self._lora_reference:
            if self.config.ref.precompute_ref_log_probs:
                with self._adapters_disabled():
                    self._precompute_reference(dataset, self.model)
                dataset.has_reference = True
            return
        if not self.config.ref.precompute_ref_log_probs:
            if self.ref_model is None:
                self.ref_model = self._prepare_frozen(self._build_reference())
            return
        if self.ref_model is not None:
            ref = self.ref_model
        elif self._policy_is_initial and not self.config.ref.path:
            ref = self.model
        else:
            ref = self._prepare_frozen(self._build_reference())
        was_training = ref.training
        ref.eval()
        with torch.no_grad():
            self._precompute_reference(dataset, ref)
        ref.train(was_training)
        dataset.has_reference = True

    def _reference_pair_logps(
        self, model: torch.nn.Module, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The two sequence log-probs ``[batch]`` that ``reference_keys`` name, as ``model`` scores them."""
        raise NotImplementedError

    def _precompute_reference(self, dataset: Any, ref: torch.nn.Module) -> None:
        """Store ``ref``'s log-probs in every row of ``dataset`` under ``reference_keys``."""
        first, second = self.reference_keys
        for items, batch in self._dataset_micro_batches(dataset):
            a, b = self._reference_pair_logps(ref, batch)
            for item, x, y in zip(items, a.tolist(), b.tolist()):
                item[first], item[second] = x, y

    def _reference_logps(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Reference log-probs of a micro-batch: its precomputed ``reference_keys`` columns, else the live reference."""
        first, second = self.reference_keys
        if first in batch:
            return batch[first], batch[second]
        if self._lora_reference:
            with self._adapters_disabled():
                return self._reference_pair_logps(self.model, batch)
        if self.ref_model is None:
            raise RuntimeError(
                f"{type(self).__name__} needs reference log-probs: no reference model and no {first} / {second} in the "
                "batch"
            )
        with torch.no_grad():
            return self._reference_pair_logps(self.ref_model, batch)

    @contextlib.contextmanager
    def _adapters_disabled(self) -> Iterator[None]:
        """The LoRA policy as its frozen base (adapters off, eval mode, no grad): the reference policy."""
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad(), self.model.disable_adapter():
                yield
        finally:
            self.model.train(was_training)
