"""Where the PPO driver's batches come from: :class:`DriverData`, the part of
:class:`~verl.trainer.ppo.ray_trainer.RayPPOTrainer` held as ``trainer.data``.

It holds the datasets, the train and validation loaders, the data position (the loader's iterator and the epoch),
the step budget they give (``total_training_steps``) and the data ledger (every consumed prompt index,
:mod:`~verl.trainer.ppo.resume_check`). It is built from the ``data`` and ``trainer`` config sections only and
knows nothing of workers. Two functions of a step's batch live here too: :func:`balance_batch` (sequence lengths
balanced over the data-parallel ranks) and :func:`collect_varied_groups` (DAPO's dynamic sampling).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from verl.data.config import DataConfig
from verl.protocol import DataProto
from verl.trainer.ppo.batch_transforms import filter_uniform_groups
from verl.trainer.ppo.resume_check import LEDGER_KEY, DataLedger
from verl.trainer.ppo.sessions import has_segment_rows

__all__ = ["DriverData", "balance_batch", "collect_varied_groups"]

logger = logging.getLogger(__name__)


def loader_batch_size(data_cfg: Any) -> tuple[int, str]:
    """Prompts the training loader yields per batch and the key that sets it: ``data.gen_batch_size`` when set (the
    generation round of DAPO's dynamic sampling, which keeps ``data.train_batch_size`` groups out of one or more
    rounds), else ``data.train_batch_size``."""
    gen = data_cfg.get("gen_batch_size") if hasattr(data_cfg, "get") else getattr(data_cfg, "gen_batch_size", None)
    if gen is not None:
        return int(gen), "data.gen_batch_size"
    return int(data_cfg.train_batch_size), "data.train_batch_size"


class DriverData:
    """The PPO driver's datasets, loaders, data position and ledger.

    ``data_cfg`` is the ``data`` section (:class:`~verl.data.config.DataConfig` or its DictConfig node: reads
    ``train_batch_size``, ``val_batch_size``, ``dataloader_num_workers``), ``trainer_cfg`` the ``trainer`` section
    (:class:`~verl.trainer.config.schema.TrainerConfig`: ``total_epochs``, ``total_training_steps``,
    ``verify_resume``). The loaders are built by :meth:`create_dataloaders` (the driver calls it when it has a
    training set; the Python API brings its own batches and never does)."""

    def __init__(
        self,
        data_cfg: DataConfig,
        trainer_cfg: Any,
        train_dataset: Any = None,
        val_dataset: Any = None,
        collate_fn: Callable | None = None,
        train_sampler: Any = None,
    ) -> None:
        self.data_cfg = data_cfg
        self.trainer_cfg = trainer_cfg
        self.train_dataset = train_dataset
        self.val_dataset = val_dataset
        self.collate_fn = collate_fn
        self.train_sampler = train_sampler
        self.train_dataloader: Any = None
        self.val_dataloader: Any = None
        self.total_training_steps = 0
        self.epoch = 0
        # every consumed prompt index and the step count, checked at each step and on resume (resume_check.py)
        self.ledger = DataLedger()
        self._iter: Iterator | None = None
        # async_training.partial_rollout in synchronous training: the groups drawn and not yet trained on
        # (verl/trainer/ppo/partial_rollout_pool.py); set by the driver
        self.partial: Any = None
        # algorithm.spo: which prompts of a loader batch a step trains, by their tracked values
        # (verl/trainer/ppo/spo_driver.py); set by the driver
        self.spo: Any = None

    def create_dataloaders(
        self, train_dataset: Any = None, val_dataset: Any = None, collate_fn: Any = None, train_sampler: Any = None
    ) -> None:
        """The train and validation loaders and ``total_training_steps`` (``trainer.total_training_steps`` when set,
        verl's rule, else loader batches x ``trainer.total_epochs``). Arguments given replace the held ones."""
        from verl.data.dataloader import StatefulDataLoader
        from verl.data.rl_dataset import collate_fn as default_collate
        from verl.trainer.config.validation import ConfigError

        self.train_dataset = train_dataset if train_dataset is not None else self.train_dataset
        self.val_dataset = val_dataset if val_dataset is not None else self.val_dataset
        self.collate_fn = collate_fn or self.collate_fn
        self.train_sampler = train_sampler if train_sampler is not None else self.train_sampler
        if self.train_dataset is None:
            raise ValueError("create_dataloaders needs a training set (train_dataset)")
        batch_size, batch_key = loader_batch_size(self.data_cfg)
        collate = self.collate_fn or default_collate
        if len(self.train_dataset) < batch_size:
            # a config problem only visible once the data is loaded: ConfigError makes main_ppo exit with code 2
            raise ConfigError(
                f"{batch_key}={batch_size} is larger than the training set "
                f"({len(self.train_dataset)} rows after filtering): no full batch can be formed"
            )
        # data.dataloader_num_workers: worker processes that read and collate batches ahead of the trainer
        num_workers = int(self.data_cfg.dataloader_num_workers or 0)
        self.train_dataloader = StatefulDataLoader(
            self.train_dataset,
            batch_size=batch_size,
            sampler=self.train_sampler,
            collate_fn=collate,
            drop_last=True,
            num_workers=num_workers,
        )
        if self.val_dataset is not None and len(self.val_dataset) > 0:
            val_sampler = None
            if self.data_cfg.validation_shuffle:  # one seeded order: every validation (and run) sees the same rows
                from verl.data.sampler import ResumableSampler

                val_sampler = ResumableSampler(self.val_dataset, shuffle=True, seed=int(self.data_cfg.seed))
            self.val_dataloader = StatefulDataLoader(
                self.val_dataset,
                batch_size=int(self.data_cfg.val_batch_size or len(self.val_dataset)),
                sampler=val_sampler,
                collate_fn=collate,
                drop_last=False,
                num_workers=num_workers,
            )
        steps = len(self.train_dataloader) * int(self.trainer_cfg.total_epochs)
        # an explicit step budget wins (verl's rule); the run still ends when the epochs run out
        if self.trainer_cfg.total_training_steps:
            steps = int(self.trainer_cfg.total_training_steps)
        self.total_training_steps = steps

    def next_batch(self) -> DataProto | None:
        """The next prompt batch, moving to the next epoch when one is exhausted; None after the last epoch. Every
        batch drawn is recorded in the ledger. With a partial-rollout pool still holding groups after the last
        epoch, an empty batch: the step trains on the pool's groups."""
        batch = self.next_loader_batch()
        if batch is None and self.partial is not None and self.partial.groups:
            return DataProto()
        return batch

    def next_loader_batch(self) -> DataProto | None:
        """The loader's next batch across epochs (recorded in the ledger); None after the last epoch."""
        if self.train_dataloader is None:
            raise ValueError(
                "no training data loader (data.train_files): the trainer draws its prompt batches from it"
                + (" (async_training.partial_rollout pools two of them, so batches passed to step() one at a time "
                   "cannot be used)" if self.partial is not None else "")
            )  # fmt: skip
        while True:
            if self._iter is None:
                self._iter = iter(self.train_dataloader)
            try:
                raw = next(self._iter)
            except StopIteration:
                self._iter = None
                self.epoch += 1
                if self.epoch >= int(self.trainer_cfg.total_epochs):
                    return None
                continue
            self.ledger.record_batch(self.train_dataloader.last_indices, raw)
            return DataProto.from_single_dict(raw)

    def state_dict(self) -> dict[str, Any]:
        """The data position for ``data.pt``: the epoch, a partial-rollout pool, SPO's prompt values (the recipe keeps
        them in memory only), and with a loader its position and the ledger."""
        state: dict[str, Any] = {"epoch": self.epoch}
        if self.partial is not None:
            state["partial_rollout"] = self.partial.state_dict()
        if self.spo is not None:
            state["spo"] = self.spo.state_dict()
        if self.train_dataloader is not None:
            state["dataloader"] = self.train_dataloader.state_dict()
            state[LEDGER_KEY] = self.ledger.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any], path: str, batches_per_step: int | None) -> None:
        """Restore the data position of checkpoint ``path`` (its ``data.pt`` dict ``state``) and check that the
        resume continues the step counter and the data order
        (:func:`~verl.trainer.ppo.resume_check.verify_resume`, ``trainer.verify_resume``; ``batches_per_step``:
        loader batches one step consumes, None for at least one). A loader position this run cannot continue is
        :class:`~verl.checkpoint.identity.CheckpointMismatchError` naming the keys."""
        from verl.checkpoint.identity import CheckpointMismatchError
        from verl.trainer.ppo.resume_check import verify_resume

        if self.train_dataloader is not None and "dataloader" in state:
            try:
                self.train_dataloader.load_state_dict(state["dataloader"])
            except ValueError as err:
                raise CheckpointMismatchError(
                    f"refusing to resume checkpoint {path}: {err} (data.train_batch_size / data.* of this run differ "
                    f"from the run in {os.path.dirname(os.path.normpath(path))}); use that run's data keys, or set "
                    "trainer.experiment_name to a new name, or start over with trainer.resume_mode=disable "
                    "trainer.overwrite_checkpoints=true (deletes its checkpoints)"
                ) from None
        self.epoch = int(state.get("epoch", 0))
        if self.partial is not None:
            if "partial_rollout" not in state:
                raise CheckpointMismatchError(
                    f"refusing to resume checkpoint {path} with async_training.partial_rollout=true: it was saved "
                    "without partial rollouts (its data.pt has no pool); resume it without them"
                )
            self.partial.load_state_dict(state["partial_rollout"])
        if self.spo is not None and "spo" in state:
            self.spo.load_state_dict(state["spo"])
        elif self.spo is not None:
            logger.warning("checkpoint %s was saved without SPO: every prompt value starts at the prior", path)
        ledger = state.get(LEDGER_KEY)
        if ledger is not None and self.train_dataloader is not None:
            if bool(self.trainer_cfg.verify_resume):
                verify_resume(state, self.train_dataloader, path, batches_per_step)
            self.ledger.load_state_dict(ledger)
        elif self.train_dataloader is not None:
            logger.warning("checkpoint %s has no data ledger (written by an older version): resume not verified", path)
        self.ledger.steps = int(state["global_steps"])  # (equal when verified) the next step is this + 1


def balance_batch(
    batch: DataProto,
    world_size: int,
    metrics: dict[str, Any],
    prefix: str = "global_seqlen",
    keep_groups: bool = False,
) -> None:
    """Reorder the rows of ``batch`` in place so each of ``world_size`` data-parallel ranks gets a similar number of
    tokens (equal row counts; Karmarkar-Karp partitions of the ``attention_mask`` lengths, as verl's
    ``_balance_batch``); adds ``<prefix>/*`` imbalance metrics. A batch that does not split evenly is left as is.

    ``keep_groups`` (``actor.use_prefix_grouper``): the rows sharing a ``uid`` go to one rank together, so each
    group's prompt is run once there (:func:`_group_partitions`); groups of unequal sizes, or a group count that
    does not divide over the ranks, fall back to row balancing (the grouped forward stays exact, it shares less)."""
    from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions, log_seqlen_unbalance

    if world_size <= 1 or len(batch) % world_size != 0:
        return
    seqlens = batch.batch["attention_mask"].sum(-1).tolist()
    partitions = None
    if keep_groups and "uid" in batch.non_tensor_batch:
        partitions = _group_partitions(seqlens, list(batch.non_tensor_batch["uid"]), world_size)
    if partitions is None:
        partitions = get_seqlen_balanced_partitions(seqlens, k_partitions=world_size, equal_size=True)
    order = torch.tensor([i for part in partitions for i in sorted(part)])
    batch.reorder(order)
    metrics.update(log_seqlen_unbalance(seqlen_list=seqlens, partitions=partitions, prefix=prefix))


def _group_partitions(seqlens: list[int], uids: list[Any], world_size: int) -> list[list[int]] | None:
    """Rows partitioned over ``world_size`` ranks by whole ``uid`` groups, balanced by the groups' token counts
    (equal group counts per rank); None when the groups differ in size or their count does not divide."""
    from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions

    groups: dict[Any, list[int]] = {}
    for row, uid in enumerate(uids):
        groups.setdefault(uid, []).append(row)
    members = list(groups.values())
    if len(members) % world_size != 0 or len({len(m) for m in members}) != 1:
        return None
    weights = [sum(seqlens[r] for r in m) for m in members]
    parts = get_seqlen_balanced_partitions(weights, k_partitions=world_size, equal_size=True)
    return [[r for g in part for r in members[g]] for part in parts]


def collect_varied_groups(
    batch: DataProto,
    rollout_and_score: Callable[[DataProto], DataProto],
    next_batch: Callable[[], DataProto | None],
    filter_cfg: Any,
    target_groups: int,
    n: int,
    world_size: int,
    metrics: dict[str, Any],
) -> DataProto:
    """DAPO dynamic sampling (``algorithm.filter_groups``): generate and score prompt batches (``rollout_and_score``,
    the next from ``next_batch``) until ``target_groups`` groups of ``n`` rollouts with varied ``filter_cfg.metric``
    (default the summed score) exist or ``max_num_gen_batches`` is reached; returns a whole number of groups that
    divides over ``world_size`` ranks. Adds ``train/num_gen_batches`` and ``train/num_kept_groups``."""
    kept: DataProto | None = None
    num_groups, num_gen = 0, 0
    while True:
        num_gen += 1
        scored = rollout_and_score(batch)
        if filter_cfg.metric in scored.non_tensor_batch:
            values = np.asarray(scored.non_tensor_batch[filter_cfg.metric], dtype=np.float64)
        else:
            values = scored.batch["token_level_scores"].sum(-1).numpy()
        filtered, groups = filter_uniform_groups(scored, values)
        kept = filtered if kept is None else DataProto.concat([kept, filtered], meta_info_conflicts="first")
        num_groups += groups
        max_gen = int(filter_cfg.max_num_gen_batches)
        if num_groups >= target_groups or (max_gen > 0 and num_gen >= max_gen):
            break
        batch = next_batch()
        if batch is None:
            break
    metrics["train/num_gen_batches"] = num_gen
    metrics["train/num_kept_groups"] = num_groups
    keep_groups = min(num_groups, target_groups)
    # a whole number of groups, divisible over the ranks
    while keep_groups > 0 and (keep_groups * n) % world_size != 0:
        keep_groups -= 1
    if keep_groups == 0:
        raise RuntimeError(
            f"dynamic sampling kept no group with varied rewards after {num_gen} generation batches; "
            "every group scored the same (increase algorithm.filter_groups.max_num_gen_batches or rollout.n)"
        )
    if not has_segment_rows(kept):
        return kept[: keep_groups * n]
    # trajectories that gave several rows (verl.trainer.ppo.sessions): the first keep_groups groups, whole
    uids = kept.non_tensor_batch["uid"]
    first = set(list(dict.fromkeys(uids.tolist()))[:keep_groups])
    return kept.select_idxs(np.array([uid in first for uid in uids], dtype=bool))
