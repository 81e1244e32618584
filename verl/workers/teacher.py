"""The teacher role of distillation: a frozen model with its own weights that scores the student's tokens.

Like the reference policy (a frozen model whose log-probs enter the loss), but loaded from its own path
(``teacher.path``) and required to share the student's vocabulary: the per-token comparisons of distillation
(:mod:`verl.algorithms.distillation`) index both distributions by the same token ids, so tokenizers whose
vocabularies differ are refused (:func:`check_tokenizers_compatible`).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from verl.models.loader import forward_logits, forward_logits_at
from verl.protocol import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils.device import get_device_name, get_torch_device, init_distributed_if_needed
from verl.utils.errors import ConfigError
from verl.utils.torch_functional import logprobs_from_logits


def check_tokenizers_compatible(student: Any, teacher: Any, key: str = "teacher.path") -> None:
    """Raise :class:`ConfigError` (naming ``key``) unless the two tokenizers map the same strings to the same ids.

    Compares ``get_vocab()`` (added tokens included); the message gives both sizes and a few tokens that differ.
    """
    s_vocab, t_vocab = student.get_vocab(), teacher.get_vocab()
    if s_vocab == t_vocab:
        return
    only_s = sorted(set(s_vocab) - set(t_vocab))[:5]
    only_t = sorted(set(t_vocab) - set(s_vocab))[:5]
    moved = sorted(k for k in set(s_vocab) & set(t_vocab) if s_vocab[k] != t_vocab[k])[:5]
    raise ConfigError(
        f"{key}: the teacher's tokenizer differs from the student's (vocabulary sizes {len(t_vocab)} vs "
        f"{len(s_vocab)}; only the student has {only_s}, only the teacher has {only_t}, different ids for {moved}). "
        "Distillation compares the two models token by token: use a teacher of the same tokenizer family"
    )


class TeacherModel:
    """A frozen causal LM used as the teacher.

    Args:
        model: a model path / bundled name / hub id (loaded in fp32) or a ``torch.nn.Module``.
        student_tokenizer: the student's tokenizer; the teacher's (``tokenizer`` or the one at the model path) must
            be compatible with it. The logits are cut to ``len(student_tokenizer)`` columns, so models whose
            embedding tables are padded to different sizes still compare the same token ids.
        device / dtype: where and in which autocast dtype the teacher runs.
    """

    def __init__(
        self,
        model: Any,
        student_tokenizer: Any,
        tokenizer: Any = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        trust_remote_code: bool = False,
    ) -> None:
        from verl.models.loader import load_causal_lm, load_tokenizer, resolve_model_path

        if isinstance(model, str | os.PathLike):
            path = resolve_model_path(str(model))
            if tokenizer is None:
                tokenizer = load_tokenizer(path, trust_remote_code=trust_remote_code)
            model = load_causal_lm(path, dtype=torch.float32, trust_remote_code=trust_remote_code)
        if tokenizer is not None:
            check_tokenizers_compatible(student_tokenizer, tokenizer)
        self.tokenizer = tokenizer if tokenizer is not None else student_tokenizer
        self.vocab_size = len(student_tokenizer)
        self.device = torch.device(device)
        self.dtype = dtype
        self.module = model.to(self.device).eval().requires_grad_(False)

    @torch.no_grad()
    def logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Teacher logits ``[batch, seq, vocab]`` (float32, cut to the student's tokenizer size)."""
        if position_ids is None:
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32):
            out = forward_logits(self.module, input_ids, attention_mask, position_ids)
        return out[..., : self.vocab_size].float()

    @torch.no_grad()
    def logits_at(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor | None,
        flat_positions: torch.Tensor,
    ) -> torch.Tensor:
        """Teacher logits ``[1, K, vocab]`` (float32, cut to the student's tokenizer size) at ``flat_positions
        [K]`` (``row * seq + col`` of ``input_ids [batch, seq]``), the LM head run at those positions only
        (:func:`~verl.models.loader.forward_logits_at`)."""
        if position_ids is None:
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32):
            out = forward_logits_at(self.module, input_ids, attention_mask, position_ids, flat_positions)
        return out[..., : self.vocab_size].float()

    @torch.no_grad()
    def compute_log_prob(self, data: DataProto, micro_batch_size: int = 8) -> DataProto:
        """``teacher_log_prob [batch, response_len]``: the teacher's log-prob of each response token of a rollout
        batch (``input_ids``/``attention_mask`` ``[batch, prompt_len + response_len]``, ``responses``), the same
        layout as ``ref_log_prob``."""
        input_ids, mask = data.batch["input_ids"], data.batch["attention_mask"]
        response_len = data.batch["responses"].shape[-1]
        position_ids = data.batch["position_ids"] if "position_ids" in data.batch.keys() else None
        out = []
        for start in range(0, input_ids.shape[0], max(1, micro_batch_size)):
            rows = slice(start, start + micro_batch_size)
            ids = input_ids[rows].to(self.device)
            pos = None if position_ids is None else position_ids[rows].to(self.device)
            logits = self.logits(ids, mask[rows].to(self.device), pos)
            # the logits at position t predict token t + 1: the response's predictions start one before it
            logits = logits[:, -response_len - 1 : -1, :]
            out.append(logprobs_from_logits(logits, ids[:, -response_len:]).cpu())
        return DataProto.from_dict(tensors={"teacher_log_prob": torch.cat(out)})


def score_routed(teachers: list[TeacherModel], routes: Any, data: DataProto, micro_batch_size: int = 8) -> torch.Tensor:
    """``teacher_log_prob [batch, response_len]`` where row ``i`` is scored by ``teachers[routes[i]]`` alone.

    ``routes``: ``[batch]`` ints (:func:`verl.workers.teacher_routing.route_rows`). Each teacher sees only its own
    rows (one sub-batch per teacher), so a row's log-probs are the ones its teacher gives when it scores the row
    alone."""
    import numpy as np

    routes = np.asarray(routes)
    out: torch.Tensor | None = None
    for t, teacher in enumerate(teachers):
        rows = np.nonzero(routes == t)[0]
        if rows.size == 0:
            continue
        part = teacher.compute_log_prob(data.select_idxs(rows), micro_batch_size).batch["teacher_log_prob"]
        if out is None:
            out = torch.zeros(len(data), part.shape[-1], dtype=part.dtype)
        out[torch.as_tensor(rows)] = part
    if out is None:  # an empty batch
        out = torch.zeros(len(data), data.batch["responses"].shape[-1])
    return out


class TeacherWorker(Worker):
    """The ``teacher`` role of a PPO run with ``distillation.enable``: every rank holds each teacher once.

    ``config`` is the ``distillation`` section; ``student_tokenizer`` the actor's tokenizer path (each teacher's
    tokenizer is checked against it when the model loads). With several teachers (upstream v0.9's
    ``teacher_models`` routed by ``teacher_key``) each row is scored by the teacher its ``teacher_key`` column names
    (:mod:`verl.workers.teacher_routing`) and the output carries ``teacher_name`` per row for the metrics.
    """

    def __init__(self, config: Any, student_tokenizer: str):
        super().__init__()
        from verl.workers.config import DistillationConfig
        from verl.workers.fsdp_setup import private_section, set_torch_threads
        from verl.workers.teacher_routing import teacher_specs

        set_torch_threads()
        # the teacher map is read off the section as given: the typed copy keeps only the default entry
        self.specs = teacher_specs(config)
        self.config = private_section(config, DistillationConfig)
        self.student_tokenizer_path = str(student_tokenizer)
        self.device_name = get_device_name(os.environ.get("VERL_DEVICE", "auto"))
        init_distributed_if_needed(self.device_name)
        self.compute_device = get_torch_device(self.device_name)
        self.teachers: list[TeacherModel] = []

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        from verl.hardware.precision import resolve_dtype
        from verl.models.loader import load_tokenizer, resolve_model_path

        trust = bool(self.config.teacher.trust_remote_code)
        share = self.config.gpu_memory_utilization
        if share is not None and self.compute_device.type == "cuda":  # set only with a teacher pool of its own
            # upstream's teacher server gets this share of the GPU; here the teachers' process is capped at it
            torch.cuda.set_per_process_memory_fraction(float(share), self.compute_device)
        student_tok = load_tokenizer(resolve_model_path(self.student_tokenizer_path, require_weights=False), trust)
        for spec in self.specs:
            key = "distillation.teacher.path" if spec.key is None else f"distillation.teacher_models.{spec.name}"
            teacher_tok = load_tokenizer(resolve_model_path(spec.tokenizer_path, False), trust)
            check_tokenizers_compatible(student_tok, teacher_tok, key=key)
            self.teachers.append(
                TeacherModel(
                    spec.path,
                    student_tok,
                    tokenizer=teacher_tok,
                    device=self.compute_device,
                    dtype=resolve_dtype(spec.dtype, self.compute_device),
                    trust_remote_code=trust,
                )
            )

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_teacher_log_prob(self, data: DataProto) -> DataProto:
        """``teacher_log_prob [batch, response_len]`` of this rank's rows, each from its routed teacher
        (:func:`score_routed`); with several teachers also ``teacher_name`` (non-tensor, ``[batch]``)."""
        import numpy as np

        from verl.workers.teacher_routing import route_rows

        if not self.teachers:
            raise RuntimeError("TeacherWorker.compute_teacher_log_prob called before init_model")
        micro = int(self.config.micro_batch_size_per_gpu)
        if len(self.teachers) == 1:
            return self.teachers[0].compute_log_prob(data, micro)
        column = str(self.config.teacher_key)
        values = data.non_tensor_batch.get(column)
        routes = route_rows(values, [s.key for s in self.specs], column, len(data))
        log_probs = score_routed(self.teachers, routes, data, micro)
        names = np.array([self.specs[i].name for i in routes], dtype=object)
        return DataProto.from_dict(tensors={"teacher_log_prob": log_probs}, non_tensors={"teacher_name": names})
