"""Where the PPO driver's batches come from: the data loaders over epochs, the next prompt batch, sequence lengths
balanced over the ranks, and DAPO's dynamic sampling (generate until enough groups have varied rewards).

A part of :class:`~verl.trainer.ppo.ray_trainer.RayPPOTrainer` (as :mod:`driver_checkpoint` and
:mod:`driver_report` are): it reads the driver's config, datasets and worker groups, and its data position
(``_data_iter``, ``_epoch``) is what the checkpoint saves.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto
from verl.trainer.ppo.batch_transforms import filter_uniform_groups


class DriverDataMixin:
    """The data loaders and the prompt batches of the PPO driver."""

    def _create_dataloaders(self) -> None:
        """The train and validation loaders (``data.*``) and ``total_training_steps``."""
        from verl.data.dataloader import StatefulDataLoader
        from verl.data.rl_dataset import collate_fn as default_collate
        from verl.trainer.config.validation import ConfigError

        data_cfg = self.config.data
        collate = self.collate_fn or default_collate
        if len(self.train_dataset) < int(data_cfg.train_batch_size):
            # a config problem only visible once the data is loaded: ConfigError makes main_ppo exit with code 2
            raise ConfigError(
                f"data.train_batch_size={data_cfg.train_batch_size} is larger than the training set "
                f"({len(self.train_dataset)} rows after filtering): no full batch can be formed"
            )
        # data.dataloader_num_workers: worker processes that read and collate batches ahead of the trainer
        num_workers = int(data_cfg.dataloader_num_workers or 0)
        self.train_dataloader = StatefulDataLoader(
            self.train_dataset,
            batch_size=int(data_cfg.train_batch_size),
            sampler=self.train_sampler,
            collate_fn=collate,
            drop_last=True,
            num_workers=num_workers,
        )
        if self.val_dataset is not None and len(self.val_dataset) > 0:
            val_bs = data_cfg.val_batch_size or len(self.val_dataset)
            self.val_dataloader = StatefulDataLoader(
                self.val_dataset,
                batch_size=int(val_bs),
                sampler=None,
                collate_fn=collate,
                drop_last=False,
                num_workers=num_workers,
            )
        steps = len(self.train_dataloader) * int(self.config.trainer.total_epochs)
        # an explicit step budget wins (verl's rule); the run still ends when the epochs run out
        if self.config.trainer.total_training_steps:
            steps = int(self.config.trainer.total_training_steps)
        self.total_training_steps = steps

    def _next_training_batch(self) -> DataProto | None:
        """The next prompt batch from the data loader, moving to the next epoch when one is exhausted."""
        while True:
            if self._data_iter is None:
                self._data_iter = iter(self.train_dataloader)
            try:
                raw = next(self._data_iter)
            except StopIteration:
                self._data_iter = None
                self._epoch += 1
                if self._epoch >= int(self.config.trainer.total_epochs):
                    return None
                continue
            self.data_ledger.record_batch(self.train_dataloader.last_indices, raw)
            return DataProto.from_single_dict(raw)

    def ledger_batches_per_step(self) -> int | None:
        """Loader batches one training step consumes (what :func:`~verl.trainer.ppo.resume_check.verify_resume`
        checks a checkpoint against): 1, or None (at least one) with dynamic sampling
        (``algorithm.filter_groups.enable``), which draws until enough groups have varied rewards."""
        return None if self.algorithm.filter_groups.enable else 1

    def _balance_batch(self, batch: DataProto, metrics: dict[str, Any]) -> None:
        """Reorder rows so every data-parallel rank gets a similar number of tokens (equal row counts)."""
        from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions, log_seqlen_unbalance

        world = self.actor_rollout_wg.world_size
        if world <= 1 or len(batch) % world != 0:
            return
        seqlens = batch.batch["attention_mask"].sum(-1).tolist()
        partitions = get_seqlen_balanced_partitions(seqlens, k_partitions=world, equal_size=True)
        order = torch.tensor([i for part in partitions for i in sorted(part)])
        batch.reorder(order)
        metrics.update(log_seqlen_unbalance(seqlen_list=seqlens, partitions=partitions, prefix="global_seqlen"))

    def _collect_filtered_batch(self, batch: DataProto, timing: dict, metrics: dict) -> DataProto:
        """DAPO dynamic sampling: keep generating until ``train_batch_size`` groups with varied rewards exist."""
        cfg = self.algorithm.filter_groups
        target = int(self.config.data.train_batch_size)
        n = int(self.config.actor_rollout_ref.rollout.n)
        kept: DataProto | None = None
        num_groups, num_gen = 0, 0
        while True:
            num_gen += 1
            scored = self._rollout_and_score(batch, timing, metrics)
            metric_name = cfg.metric
            if metric_name in scored.non_tensor_batch:
                values = np.asarray(scored.non_tensor_batch[metric_name], dtype=np.float64)
            else:
                values = scored.batch["token_level_scores"].sum(-1).numpy()
            filtered, groups = filter_uniform_groups(scored, values)
            kept = filtered if kept is None else DataProto.concat([kept, filtered], meta_info_conflicts="first")
            num_groups += groups
            max_gen = int(cfg.max_num_gen_batches)
            if num_groups >= target or (max_gen > 0 and num_gen >= max_gen):
                break
            batch = self._next_training_batch()
            if batch is None:
                break
        metrics["train/num_gen_batches"] = num_gen
        metrics["train/num_kept_groups"] = num_groups
        keep_groups = min(num_groups, target)
        # a whole number of groups, divisible over the ranks
        while keep_groups > 0 and (keep_groups * n) % self.actor_rollout_wg.world_size != 0:
            keep_groups -= 1
        if keep_groups == 0:
            raise RuntimeError(
                f"dynamic sampling kept no group with varied rewards after {num_gen} generation batches; "
                "every group scored the same (increase algorithm.filter_groups.max_num_gen_batches or rollout.n)"
            )
        return kept[: keep_groups * n]
