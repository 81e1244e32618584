"""The loop shared by the offline trainers (SFT, DPO, KTO): data order, micro-batching, optimizer step, logging,
evaluation, checkpoints, resume and the final Hugging Face export.

A subclass supplies its dataset (``_make_dataset``), how many loss units a micro-batch holds (``_count_units``:
tokens, pairs or rows) and its loss (``_compute_loss`` -> :class:`LossOutput`); DPO/KTO also name their two
reference log-prob columns (``reference_keys``) and how a model scores them (``_reference_pair_logps``), from which
this class precomputes them or reads them from a live reference model. The step's loss is ``sum over micro-batches
of loss_sum / units in the step``, so gradient accumulation gives exactly the gradient of the whole batch. Under
torch.distributed (world size > 1) the policy is sharded with FSDP2 (over all ranks, or within groups of
``model.fsdp_size`` ranks and replicated across them: hybrid sharding), each rank takes every ``world``-th row of a
batch, and the per-rank loss is scaled by the world size because FSDP averages gradients over all ranks. What is
trained (the tokenizer, the policy module with LoRA and gradient checkpointing, the run identity) is built by
:mod:`verl.trainer.offline.policy_setup`.
"""

from __future__ import annotations

import logging
import math
import os
import random
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf

from verl.checkpoint.checkpoint_manager import is_peft_model
from verl.checkpoint.layout import (
    check_checkpoint_root,
    get_step_dir,
    prepare_checkpoint_root,
    resolve_resume_path,
)
from verl.hardware.precision import resolve_dtype
from verl.trainer.config.validation import ConfigError
from verl.trainer.offline import checkpoint as ckpt
from verl.trainer.offline.common import LossOutput, build_offline_config, merge_stats
from verl.trainer.offline.policy_setup import import_external_lib, load_policy, load_trainer_tokenizer, run_identity
from verl.trainer.offline.reference import ReferencePolicyMixin
from verl.trainer.offline.reporting import OfflineReportMixin
from verl.utils.device import get_device_name, get_torch_device, init_distributed_if_needed
from verl.utils.fs import namespaced_path
from verl.utils.fsdp_utils import apply_fsdp2, fsdp_mesh, fsdp_size_problem, resolve_remove_padding
from verl.utils.graceful_stop import GracefulStop
from verl.utils.logging_utils import console_write
from verl.utils.optim import build_lr_scheduler, build_optimizer
from verl.utils.seeding import epoch_seed

logger = logging.getLogger(__name__)


_import_external_lib = import_external_lib  # importable from here, as before


class OfflineTrainer(OfflineReportMixin, ReferencePolicyMixin):
    """Base of :class:`SFTTrainer`, :class:`DPOTrainer` and :class:`KTOTrainer` (see the module docstring).

    Args:
        model: a model path (local HF dir, bundled name, hub id) or a ``torch.nn.Module`` (trained in place;
            its floating-point weights are kept in fp32).
        tokenizer: a Hugging Face tokenizer; loaded from the model path when None.
        dataset / eval_dataset: a ``datasets.Dataset``, parquet/jsonl/json path(s), a DataFrame or a list of dicts.
        namespace: checkpoints, logs and the export go under ``<output_dir>/<namespace>``.
        config: extra config keys, dotted (``{"optim.weight_decay": 0.1}``) or nested (``{"optim": {...}}``), or a
            whole ``DictConfig``; applied after the constructor arguments.
        overrides: config keys set by the subclass from its own arguments.
    """

    config_schema: ClassVar[type]
    uses_reference: ClassVar[bool] = False
    # The dataset columns holding precomputed reference log-probs (two per row), for trainers that use a reference.
    reference_keys: ClassVar[tuple[str, str]] = ("", "")

    def __init__(
        self,
        model: torch.nn.Module | str,
        tokenizer: Any = None,
        dataset: Any = None,
        eval_dataset: Any = None,
        namespace: str | None = None,
        config: dict[str, Any] | DictConfig | None = None,
        overrides: dict[str, Any] | None = None,
        ref_model: torch.nn.Module | None = None,
    ) -> None:
        layer: dict[str, Any] = dict(overrides or {})
        if namespace is not None:
            layer["trainer.namespace"] = namespace
        self._model_path: str | None = None
        if isinstance(model, (str, os.PathLike)):
            self._model_path = str(model)
            layer["model.path"] = self._model_path
        elif isinstance(model, torch.nn.Module):
            name = getattr(getattr(model, "config", None), "name_or_path", None)
            layer["model.path"] = str(name) if name else f"<{type(model).__name__} object>"
        else:
            raise TypeError(f"model must be a model path (str) or a torch.nn.Module, got {type(model).__name__}")
        self.config: DictConfig = build_offline_config(self.config_schema, layer, config)
        import_external_lib(self.config.model.get("external_lib"))

        self.device_name = get_device_name(self.config.trainer.device)
        init_distributed_if_needed(self.device_name)
        self.world_size = dist.get_world_size() if dist.is_initialized() else 1
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        # model.fsdp_size against the world torchrun gave: refused here, before anything loads
        fsdp_size = int(self.config.model.fsdp_size)
        problem = fsdp_size_problem(fsdp_size, self.world_size, "model.fsdp_size")
        if problem is not None:
            raise ConfigError(problem)
        self.resumed_from: str | None = None  # the checkpoint fit() continued from, None for a fresh run
        self.stopped_by: str | None = None  # "SIGTERM"/"SIGINT" when the last fit() stopped early on a signal
        self.device = get_torch_device(self.device_name)
        self.compute_dtype = resolve_dtype(self.config.model.dtype, self.device)
        # where the policy (and a DPO/KTO reference) is sharded: None for all ranks, a 2-D (replicate, shard) mesh
        # for groups of model.fsdp_size ranks (HSDP); built once, on every rank
        self.fsdp_mesh = fsdp_mesh(self.device.type, fsdp_size, "model.fsdp_size") if self.world_size > 1 else None
        if self.config.trainer.torch_threads:
            torch.set_num_threads(self.config.trainer.torch_threads)

        self.tokenizer = tokenizer if tokenizer is not None else self._load_tokenizer(model)
        # what this trainer's checkpoints are of, from config.json or the given module before LoRA wraps it
        self.run_identity: dict[str, Any] | None = self._make_identity(model)
        self.model = self._load_policy(model)
        # model.use_remove_padding: each micro-batch's valid tokens packed (null: where that equals the padded forward)
        self.use_remove_padding = resolve_remove_padding(self.config.model.use_remove_padding, self.model)
        self.train_dataset = self._make_dataset(dataset) if dataset is not None else None
        self.eval_dataset = self._make_dataset(eval_dataset) if eval_dataset is not None else None

        self.ref_model: torch.nn.Module | None = ref_model
        # LoRA without another reference: the frozen base under the adapters is the reference policy (no copy)
        self._lora_reference = (
            self.uses_reference and ref_model is None and is_peft_model(self.model) and not self.config.ref.path
        )
        # True until the first optimizer step or checkpoint load: the policy still equals the reference.
        self._policy_is_initial = True
        if self.uses_reference and self.ref_model is None and self._needs_live_reference():
            self.ref_model = self._build_reference()
        if self.ref_model is not None:
            self.ref_model = self._prepare_frozen(self.ref_model)
        self.model.to(self.device)
        if self.world_size > 1:
            apply_fsdp2(self.model, mesh=self.fsdp_mesh)
        self.global_step = 0
        self.optimizer: torch.optim.Optimizer | None = None
        self.lr_scheduler: Any = None
        self._reporter: Any = None  # metrics.png / report.html of the current fit() (rank 0), see _make_reporter

    # ------------------------------------------------------------------------------------------ construction
    @classmethod
    def algorithm_name(cls) -> str:
        """``sft`` / ``dpo`` / ``kto``: the trainer and algorithm recorded in its checkpoints' identity."""
        return str(cls.config_schema.config_name).removesuffix("_trainer")

    @classmethod
    def identity_of(cls, config: DictConfig, model: Any = None) -> dict[str, Any]:
        """The run identity of training ``model`` (default: ``config.model.path``) with ``config``
        (:func:`verl.trainer.offline.policy_setup.run_identity`). Reads no weights."""
        return run_identity(cls.algorithm_name(), config, model)

    def _make_identity(self, model: Any) -> dict[str, Any] | None:
        try:
            return self.identity_of(self.config, model)
        except (OSError, ValueError) as err:
            logger.warning("checkpoints of this run record no identity: cannot read the model config (%s)", err)
            return None

    @classmethod
    def from_config(cls, config: DictConfig) -> OfflineTrainer:
        """Build a trainer from a full config (as ``python -m verl.trainer.main_*`` loads it).

        A checkpoint of another model (algorithm, LoRA rank) where this run would resume or save is refused first,
        from ``config.json`` and the completion markers, before the model loads
        (:class:`~verl.checkpoint.identity.CheckpointMismatchError`, a ``ConfigError``: exit code 2).
        """
        if not config.data.train_files:
            raise ConfigError("data.train_files: no training data given; set data.train_files=<parquet or jsonl path>")
        try:
            from verl.trainer.run_paths import resolve_config_paths

            resolve_config_paths(config)  # hub ids: cached or downloaded once (a file lock: ranks do not race)
            check_checkpoint_root(config.trainer, lambda: cls.identity_of(config))
            return cls(
                model=config.model.path,
                dataset=config.data.train_files,
                eval_dataset=config.data.val_files or None,
                config=config,
            )
        except ConfigError:
            raise
        except (ValueError, FileNotFoundError) as e:
            # Bad data or a bad model path on the command line: report it like a config error (exit code 2).
            raise ConfigError(str(e)) from e

    def _load_tokenizer(self, model: Any) -> Any:
        return load_trainer_tokenizer(self.config, model, self._model_path)

    def _load_policy(self, model: Any) -> torch.nn.Module:
        return load_policy(self.config, model)

    # ------------------------------------------------------------------------------------- subclass interface
    def _make_dataset(self, source: Any) -> Any:
        raise NotImplementedError

    def _count_units(self, batch: dict[str, torch.Tensor]) -> float:
        raise NotImplementedError

    def _compute_loss(self, batch: dict[str, torch.Tensor]) -> LossOutput:
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------- paths, state
    @property
    def output_root(self) -> str:
        """``<trainer.default_local_dir>[/<trainer.namespace>]``: where checkpoints, logs and the export go."""
        return namespaced_path(self.config.trainer.default_local_dir, self.config.trainer.namespace)

    def _update_config(self, updates: dict[str, Any]) -> None:
        self.config = build_offline_config(self.config_schema, self.config, updates)

    def update_config(self, updates: dict[str, Any]) -> None:
        """Set dotted config keys (``{"trainer.save_freq": 5}``) before :meth:`fit`; the result is validated."""
        self._update_config(updates)

    def steps_per_epoch(self) -> int:
        """Optimizer steps in one epoch of the training set (``data.train_batch_size`` rows each)."""
        return self._plan()[0]

    def _collate(self, items: Sequence[dict[str, Any]], dataset: Any) -> dict[str, torch.Tensor]:
        """``dataset.collate(items)`` with every tensor moved to the trainer's device (per-row lists, such as a
        vision-language batch's ``multi_modal_inputs``, stay as they are)."""
        batch = dataset.collate(list(items))
        return {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}

    def _micro_batches(self, items: Sequence[dict[str, Any]], dataset: Any) -> list[dict[str, torch.Tensor]]:
        size = self.config.data.micro_batch_size_per_gpu
        return [self._collate(items[start : start + size], dataset) for start in range(0, len(items), size)]

    def _dataset_micro_batches(self, dataset: Any) -> Iterator[tuple[list[dict[str, Any]], dict[str, torch.Tensor]]]:
        """All rows of ``dataset`` in order, ``micro_batch_size_per_gpu`` at a time: ``(row dicts, collated batch)``.

        The row dicts are the dataset's own, so writing to them (reference log-probs) updates the dataset.
        """
        size = self.config.data.micro_batch_size_per_gpu
        for start in range(0, len(dataset), size):
            items = [dataset[i] for i in range(start, min(start + size, len(dataset)))]
            yield items, self._collate(items, dataset)

    def _all_reduce(self, values: list[float]) -> list[float]:
        if self.world_size == 1:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()

    def _reduce_stats(self, stats: dict[str, tuple[float, float]]) -> dict[str, float]:
        names = list(stats)  # insertion order: the loss first, as the console shows the first few metrics
        flat = self._all_reduce([x for n in names for x in stats[n]])
        return {n: flat[2 * i] / flat[2 * i + 1] for i, n in enumerate(names) if flat[2 * i + 1] > 0}

    # --------------------------------------------------------------------------------------------- the step
    def _train_step(self, items: Sequence[dict[str, Any]]) -> dict[str, float]:
        assert self.optimizer is not None
        batches = self._micro_batches(items, self.train_dataset)
        # tokens (attention mask) of the step over all ranks: perf/throughput, as verl's PPO metric
        local_tokens = sum(float(b["attention_mask"].sum()) for b in batches if "attention_mask" in b)
        units, tokens = self._all_reduce([sum(self._count_units(b) for b in batches), local_tokens])
        if units <= 0:
            raise ValueError("a training batch holds no loss units (no response tokens / examples)")
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        stats: dict[str, tuple[float, float]] = {}
        for batch in batches:
            out = self._compute_loss(batch)
            # FSDP averages gradients over ranks; scaling by world keeps the global sum / global units.
            (out.loss_sum * (self.world_size / units)).backward()
            merge_stats(stats, out.stats)
        params = [p for p in self.model.parameters() if p.requires_grad]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.config.optim.clip_grad)
        grad_norm = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)
        if math.isfinite(grad_norm):
            self.optimizer.step()
        else:  # a non-finite gradient would poison the weights and Adam's moments: skip this update
            logger.warning("step %d: non-finite gradient norm %s, update skipped", self.global_step + 1, grad_norm)
            self.optimizer.zero_grad(set_to_none=True)
        lr = self.optimizer.param_groups[0]["lr"]
        self.lr_scheduler.step()
        self._policy_is_initial = False
        metrics = self._reduce_stats(stats)
        metrics.update({"grad_norm": grad_norm, "lr": lr})
        if tokens > 0:
            metrics["perf/total_num_tokens"] = tokens
        return metrics

    # --------------------------------------------------------------------------------------------- evaluate
    def evaluate(self, dataset: Any = None) -> dict[str, float]:
        """Mean metrics of the loss over ``dataset`` (default: the eval dataset) without updating the model.

        Returns ``{"eval/<metric>": value}`` (e.g. ``eval/loss``, ``eval/rewards/accuracies``).
        """
        ds = self._make_dataset(dataset) if dataset is not None else self.eval_dataset
        if ds is None:
            raise ValueError("evaluate() needs a dataset: pass one or give eval_dataset= / data.val_files")
        self._ensure_reference(ds)
        # every rank scores as many rows (FSDP's forward is collective): the last len % world rows are left out
        usable = len(ds) - len(ds) % self.world_size
        if usable == 0:
            raise ValueError(f"the evaluation set has {len(ds)} rows, fewer than the {self.world_size} ranks")
        indices = list(range(usable))[self.rank :: self.world_size]
        was_training = self.model.training
        self.model.eval()
        stats: dict[str, tuple[float, float]] = {}
        with torch.no_grad():
            for batch in self._micro_batches([ds[i] for i in indices], ds):
                merge_stats(stats, self._compute_loss(batch).stats)
        self.model.train(was_training)
        return {f"eval/{k}": v for k, v in self._reduce_stats(stats).items()}

    # ------------------------------------------------------------------------------------------------ train
    def train(
        self,
        num_train_epochs: int = 1,
        per_device_train_batch_size: int = 2,
        learning_rate: float | None = None,
        output_dir: str | None = None,
        gradient_accumulation_steps: int = 1,
        logging_steps: int = 1,
        save_steps: int | None = None,
        max_steps: int | None = None,
        resume_from_checkpoint: bool | str = False,
    ) -> dict[str, float]:
        """Train (Hugging Face Trainer-style arguments) and return the final metrics.

        One optimizer step sees ``per_device_train_batch_size * gradient_accumulation_steps * world_size``
        examples; ``max_steps`` (when set) replaces ``num_train_epochs``; ``save_steps=None`` saves only at the
        end; ``learning_rate=None`` keeps ``optim.lr``; ``output_dir=None`` keeps ``trainer.default_local_dir``.
        ``resume_from_checkpoint``: False starts fresh, True resumes from the latest checkpoint in the output
        directory, a path resumes from that ``global_step_N`` directory.
        """
        updates: dict[str, Any] = {
            "trainer.total_epochs": int(num_train_epochs),
            "data.micro_batch_size_per_gpu": int(per_device_train_batch_size),
            "data.train_batch_size": int(per_device_train_batch_size * gradient_accumulation_steps * self.world_size),
            "trainer.logging_steps": int(logging_steps),
            "trainer.save_freq": int(save_steps) if save_steps else -1,
            "trainer.total_training_steps": int(max_steps) if max_steps else None,
        }
        if learning_rate is not None:
            updates["optim.lr"] = float(learning_rate)
        if output_dir is not None:
            updates["trainer.default_local_dir"] = str(output_dir)
        if isinstance(resume_from_checkpoint, str):
            updates.update({"trainer.resume_mode": "resume_path", "trainer.resume_from_path": resume_from_checkpoint})
        else:
            updates["trainer.resume_mode"] = "auto" if resume_from_checkpoint else "disable"
        self._update_config(updates)
        return self.fit()

    def _drops_last_batch(self) -> bool:
        """Whether an epoch leaves out its last partial batch: always with several ranks, so that every rank runs
        the same number of collective steps; a single process keeps it unless a subclass says otherwise."""
        return self.world_size > 1

    def _plan(self) -> tuple[int, int]:
        """``(steps per epoch, total steps)``; see :meth:`_drops_last_batch` for a last partial batch."""
        n, bsz = len(self.train_dataset), self.config.data.train_batch_size
        per_epoch = n // bsz if self._drops_last_batch() else math.ceil(n / bsz)
        if per_epoch < 1:
            raise ConfigError(f"data.train_batch_size={bsz} is larger than the training set ({n} rows)")
        total = self.config.trainer.total_training_steps or self.config.trainer.total_epochs * per_epoch
        return per_epoch, int(total)

    def _epoch_order(self, epoch: int) -> list[int]:
        n = len(self.train_dataset)
        if not self.config.data.shuffle:
            return list(range(n))
        gen = torch.Generator().manual_seed(epoch_seed(int(self.config.data.seed), epoch))
        return torch.randperm(n, generator=gen).tolist()

    def _seed(self) -> None:
        seed = self.config.trainer.seed
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)

    def _save(self, epoch: int) -> None:
        ckpt.save_checkpoint(
            self.output_root,
            self.global_step,
            self.model,
            self.tokenizer,
            self.optimizer,
            self.lr_scheduler,
            extra={"global_step": self.global_step, "epoch": epoch},
            max_to_keep=self.config.trainer.max_ckpt_to_keep,
            identity=self.run_identity,
        )
        if self._reporter is not None:  # rank 0: metrics.png and report.html follow each checkpoint
            self._reporter.update(self.global_step)

    def _any_rank(self, flag: bool) -> bool:
        """``flag`` OR-ed over all ranks (one tiny all-reduce), so every rank stops after the same step."""
        if not dist.is_initialized():
            return flag
        value = torch.tensor([1.0 if flag else 0.0], device=self.device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item() > 0)

    def _finished_step(self, total: int) -> int | None:
        """The step of the checkpoint this run would resume when it is ``total`` or later (after the identity
        check), with :func:`~verl.checkpoint.finished.finished_run_message` printed on rank 0; else None."""
        from verl.checkpoint.finished import finished_checkpoint, finished_run_message

        tcfg = self.config.trainer
        resume_cfg = {"resume_mode": tcfg.resume_mode, "resume_from_path": tcfg.resume_from_path}
        found = finished_checkpoint(resume_cfg, total, self.output_root)
        if found is None:
            return None
        root_cfg = {**resume_cfg, "default_local_dir": self.output_root}
        check_checkpoint_root(root_cfg, self.run_identity, self.output_root)  # another model's: refused instead
        if self.rank == 0:
            print(f"[verl] {finished_run_message(resume_cfg, total, self.output_root)}", flush=True)
        return found[1]

    def _resume(self) -> None:
        tcfg = self.config.trainer
        if self.rank == 0:  # one rank cleans up; the others wait so nobody reads a directory being removed
            prepare_checkpoint_root(self.output_root, str(tcfg.resume_mode), overwrite=bool(tcfg.overwrite_checkpoints))
        if dist.is_initialized():
            dist.barrier()
        resume_cfg = {
            "default_local_dir": tcfg.default_local_dir,
            "namespace": tcfg.namespace,
            "resume_mode": tcfg.resume_mode,
            "resume_from_path": tcfg.resume_from_path,
        }
        # another run's checkpoint (model, algorithm, LoRA rank) is refused before it loads; the same on every rank
        check_checkpoint_root(resume_cfg, self.run_identity, self.output_root)
        path = resolve_resume_path(resume_cfg, identity=self.run_identity)
        if path is None:
            return
        extra = ckpt.load_checkpoint(path, self.model, self.optimizer, self.lr_scheduler)
        self.global_step = int(extra.get("global_step", 0))
        self._policy_is_initial = False
        self.resumed_from = path
        logger.info("resumed from %s at step %d", path, self.global_step)
        if self.rank == 0:  # said before the first step, so a continued run is never mistaken for a new one
            print(f"[verl] resumed from {path} at step {self.global_step}", flush=True)

    def _build_optimizer(self, total: int) -> None:
        """The optimizer over the trainable parameters and its schedule over ``total`` steps (``optim.*``)."""
        optim_cfg = OmegaConf.to_container(self.config.optim)
        optim_cfg["total_training_steps"] = total
        self.optimizer = build_optimizer([p for p in self.model.parameters() if p.requires_grad], optim_cfg)
        self.lr_scheduler = build_lr_scheduler(self.optimizer, optim_cfg, total_training_steps=total)

    def _timed_step(self, rows: Sequence[int], epoch: float) -> dict[str, float]:
        """One optimizer step on this rank's ``rows`` of the training set; its metrics with ``epoch``,
        ``perf/time_per_step`` and ``perf/throughput`` (tokens / s / rank, verl's name)."""
        from verl.reporting.phase import phase

        t0 = time.perf_counter()
        with phase("training step"):  # the progress bar and its heartbeat show it
            metrics = self._train_step([self.train_dataset[i] for i in rows])
        self.global_step += 1
        metrics["epoch"] = epoch
        seconds = metrics["perf/time_per_step"] = time.perf_counter() - t0
        if "perf/total_num_tokens" in metrics:
            metrics["perf/throughput"] = metrics["perf/total_num_tokens"] / (seconds * self.world_size)
        return metrics

    def _finish_training(
        self, epoch: int, saved_at: int, stop: GracefulStop | None, final: dict[str, float], tracker: Any
    ) -> None:
        """After the loop: the final evaluation (into ``final``), a checkpoint of the last step unless just saved,
        and either the stop message (``stop``: the signal that ended the run early) or the HF export."""
        if self.eval_dataset is not None and stop is None:
            eval_metrics = self.evaluate()
            final.update(eval_metrics)
            if tracker is not None:
                tracker.log(eval_metrics, step=self.global_step)
        if saved_at != self.global_step:
            self._save(epoch)
        if stop is not None:
            self.stopped_by = stop.signal_name or "signal on another rank"
            if self.rank == 0:
                console_write(  # above the progress bar, which is still shown
                    f"[verl] stopped by {self.stopped_by} after step {self.global_step}; checkpoint "
                    f"{get_step_dir(self.output_root, self.global_step)}; run the same command again to resume",
                    sys.stderr,
                )
        elif self.config.trainer.export_hf:
            target = ckpt.export_hf(self.output_root, self.model, self.tokenizer)
            if target is not None and self.rank == 0:  # named after the run (verl serve calls it that)
                from verl.utils.export_info import write_export_info

                write_export_info(target, self.config.trainer.experiment_name, self.global_step)

    def fit(self) -> dict[str, float]:
        """Run the configured training (``trainer.*``, ``data.*``, ``optim.*``) and return the final metrics:
        the last logged training metrics, ``global_step``, and ``eval/*`` when there is an eval dataset."""
        if self.train_dataset is None:
            raise ValueError("no training dataset: pass dataset= to the trainer (or data.train_files)")
        from verl.reporting import ProgressBar

        tcfg = self.config.trainer
        self._seed()
        per_epoch, total = self._plan()
        done = self._finished_step(total)
        if done is not None:  # the checkpoint to resume is the last step: said in one line, nothing rewritten
            return {"global_step": float(done), "already_finished": 1.0}
        self._ensure_reference(self.train_dataset)
        if self.eval_dataset is not None:
            self._ensure_reference(self.eval_dataset)
        self._build_optimizer(total)
        self.global_step = 0
        self._resume()
        saved_at = self.global_step if self.global_step > 0 else -1
        tracker = self._make_tracker(self.global_step if self.resumed_from else -1) if self.rank == 0 else None
        self._reporter = self._make_reporter(tracker) if self.rank == 0 else None
        if self._reporter is not None:
            self._reporter.start(resumed_step=self.global_step if self.resumed_from else None)
        failure: str | None = None
        bar = ProgressBar(total=total, initial=self.global_step, desc=type(self).__name__) if self.rank == 0 else None
        bsz, logging_steps = self.config.data.train_batch_size, int(tcfg.logging_steps)
        save_freq, test_freq = int(tcfg.save_freq), int(tcfg.test_freq)
        final: dict[str, float] = {}
        window: list[dict[str, float]] = []
        epoch, first_batch = divmod(self.global_step, per_epoch)
        stopping = False  # a SIGTERM/SIGINT arrived (on any rank): save the step just finished and stop
        try:
            with GracefulStop(type(self).__name__) as stop:
                while self.global_step < total and not stopping:
                    order = self._epoch_order(epoch)
                    for b in range(first_batch, per_epoch):
                        if self.global_step >= total:
                            break
                        rows = order[b * bsz : (b + 1) * bsz][self.rank :: self.world_size]
                        metrics = self._timed_step(rows, epoch + (b + 1) / per_epoch)
                        window.append(metrics)
                        stopping = self._any_rank(stop.requested)
                        if self.global_step % logging_steps == 0 or self.global_step == total or stopping:
                            final = {k: float(np.mean([m[k] for m in window if k in m])) for k in window[-1]}
                            window = []
                            if tracker is not None:
                                tracker.log(final, step=self.global_step)
                        if bar is not None:
                            bar.update(metrics, step=self.global_step)
                        is_last = self.global_step == total
                        if self.eval_dataset is not None and test_freq > 0 and self.global_step % test_freq == 0:
                            if not is_last and not stopping:  # the final evaluation follows the loop
                                eval_metrics = self.evaluate()
                                if tracker is not None:
                                    tracker.log(eval_metrics, step=self.global_step)
                        if save_freq > 0 and self.global_step % save_freq == 0:
                            self._save(epoch)
                            saved_at = self.global_step
                        if stopping:
                            break
                    if stopping:
                        break
                    first_batch = 0
                    epoch += 1
            self._finish_training(epoch, saved_at, stop if stopping else None, final, tracker)
        except BaseException as err:
            failure = f"{type(err).__name__}: {err}"  # the report says the run failed, and why
            raise
        finally:
            if bar is not None:
                bar.close()
            if tracker is not None:
                tracker.finish()
            if self._reporter is not None:
                self._reporter.finish(self.global_step, stopped_by=self.stopped_by if stopping else None, error=failure)
        if stopping:  # the CLI exits with 128 + the signal number
            final["stopped_by"] = self.stopped_by  # type: ignore[assignment]
        final["global_step"] = float(self.global_step)
        return final
