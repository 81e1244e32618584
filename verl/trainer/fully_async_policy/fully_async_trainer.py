"""Fully asynchronous PPO/GRPO: a rollouter process streams rollouts into a bounded queue, the trainer consumes them.

The training loop is :meth:`RayPPOTrainer.fit` unchanged; only where a step's rollouts come from differs. Before
each step the trainer tops up the rollouter's queue with as many prompt batches as the staleness bound allows
(:meth:`FullyAsyncRayPPOTrainer.fill_queue`), then the step's rollout stage takes the oldest finished rollouts instead
of generating, scores them and runs :meth:`update_stage` as usual; after every ``trigger_parameter_sync_step`` steps
the new weights go to the rollouter (:meth:`sync_weights`).

Schedule (upstream verl's ``async_training`` keys, ``verl/experimental/fully_async_policy``):

- one step consumes ``require_batches`` prompt batches of ``data.train_batch_size`` prompts (``rollout.n`` responses
  each); one parameter version lasts ``trigger_parameter_sync_step`` steps, i.e. ``R = require_batches *
  trigger_parameter_sync_step`` batches;
- the weight version ``v`` counts pushes; while the rollouter holds version ``v`` it may have been given prompt
  batches with index ``i < floor((v + 1 + staleness_threshold) * R)`` (0-based): ``staleness_threshold=0`` admits only
  the batches trained under version ``v`` itself, 1 admits one version ahead (one-step-off-policy), 0.5 half of one;
- the staleness of a consumed row is the trainer's version minus the version its generation started with; the rule
  above keeps it at most ``ceil(staleness_threshold)``, and every batch is checked against that bound
  (``async/staleness/max`` is logged each step; a violation stops the run).

With ``staleness_threshold=0`` and ``trigger_parameter_sync_step=1`` every sample is generated with exactly the
weights that train on it (on-policy), so the run reproduces the synchronous trainer on the same seed; the
``rollout_weight_version`` stamped on each row is the proof. ``use_rollout_log_probs`` takes the old-policy
log-probs from the rollout (``algorithm.rollout_correction.bypass_mode``) instead of recomputing them.
"""

from __future__ import annotations

import copy
import math
import time
from collections import deque
from typing import Any

import numpy as np
from omegaconf import open_dict

from verl.protocol import DataProto
from verl.trainer.ppo.invariants import StalenessError, stamp_policy_version
from verl.trainer.ppo.metric_utils import marked_timer
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.rollout_skip import RolloutSkip
from verl.utils.seeding import generation_seed

__all__ = ["FullyAsyncRayPPOTrainer", "StalenessError"]


class FullyAsyncRayPPOTrainer(RayPPOTrainer):
    """:class:`RayPPOTrainer` whose rollouts come from a separate rollouter process (see the module docstring).

    The trainer's own worker group trains; the rollouter's replicas hold the policy's other copies and their
    engines, and rank 0 of the actor group pushes the weights to them. Validation runs on the rollouter too
    (:meth:`generate_on_engines`), so the trainer's ranks hold no engine, as upstream's; with
    ``async_training.use_trainer_do_validate`` they keep one and validate on it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.config.async_training
        self.staleness_threshold = self.schedule_staleness()
        self.trigger_parameter_sync_step = self.schedule_trigger()
        self.require_batches = self.schedule_require_batches()
        self.partial_rollout = bool(cfg.partial_rollout)
        if bool(cfg.use_rollout_log_probs):
            # the rollout's log-probs are the old policy: the bypass mode of rollout correction
            with open_dict(self.config):
                self.config.algorithm.rollout_correction.bypass_mode = True
        self.rollouter: Any = None
        self._rollout_pool: Any = None  # the rollout pool reserved in Ray, until the rollouter takes it
        self.weight_version = 0
        self._pushed_at_step = -1  # the trainer's step when it last pushed its weights (-1: never)
        # per submitted batch not yet consumed: where the data loader was before it was drawn (resume point)
        self._inflight: deque[dict[str, Any]] = deque()
        self._issued = 0  # prompt batches given to the rollouter so far in this run (its data index)
        # skip.async_rollout (upstream v0.9): feed indices whose rollouts replay from a dump instead of the rollouter
        self.async_skip = RolloutSkip.from_config(self.config, roles=("async_rollout",))
        self._consumed = 0
        self._step_async_metrics: dict[str, float] = {}
        # per consumed step: {"step", "versions" (rollout_weight_version per row), "prompts" (prompt token ids per
        # row)}: the record that the schedule held and of the data order, for tests and reports
        self.consumed_log: list[dict[str, Any]] = []

    # ---------------------------------------------------------------------------------------------- schedule
    def schedule_staleness(self) -> float:
        """The staleness threshold this trainer runs with (``async_training.staleness_threshold``)."""
        return float(self.config.async_training.staleness_threshold)

    def schedule_trigger(self) -> int:
        """Steps per weight push (``async_training.trigger_parameter_sync_step``)."""
        return int(self.config.async_training.trigger_parameter_sync_step)

    def schedule_require_batches(self) -> int:
        """Prompt batches per step (``async_training.require_batches``)."""
        return int(self.config.async_training.require_batches)

    @property
    def max_staleness(self) -> int:
        """The largest staleness (in weight versions) a consumed row may have: ``ceil(staleness_threshold)``."""
        return math.ceil(self.staleness_threshold)

    def current_policy_version(self) -> int:
        """The trainer's policy version: the weight pushes so far (the version the rollouter stamps on rows)."""
        return int(self.weight_version)

    def policy_staleness_bound(self) -> tuple[int, str]:
        return self.max_staleness, f"async_training.staleness_threshold={self.staleness_threshold}"

    @property
    def batches_per_version(self) -> int:
        return self.require_batches * self.trigger_parameter_sync_step

    def admitted_batches(self) -> int:
        """How many prompt batches may have been submitted while the rollouter holds ``weight_version``:
        ``floor((v + 1 + staleness_threshold) * R)``, capped at what the run will consume."""
        allowed = math.floor((self.weight_version + 1 + self.staleness_threshold) * self.batches_per_version + 1e-9)
        total = self.total_training_steps * self.require_batches
        return min(allowed, total)

    def _create_dataloaders(self) -> None:
        super()._create_dataloaders()
        if not self.config.trainer.total_training_steps:
            # a step consumes require_batches loader batches
            self.total_training_steps = max(1, self.total_training_steps // self.schedule_require_batches())

    def init_workers(self) -> None:
        """With ranks that are Ray actors, first reserve the rollout pool in Ray
        (:func:`~verl.trainer.fully_async_policy.placement.rollout_pool`: its replicas will be Ray actors on
        ``rollout.nnodes`` nodes), then place the trainer's ranks."""
        from verl.trainer.config.parallel_checks import resolve_backend

        if resolve_backend(self.config.trainer) == "ray" and self._rollout_pool is None:
            from verl.trainer.fully_async_policy.placement import rollout_pool
            from verl.trainer.ppo.runner import init_ray

            init_ray(self.config)
            self._rollout_pool = rollout_pool(self.config)
        try:
            super().init_workers()
        except BaseException:
            self.close_rollouter()  # the trainer's ranks could not be placed: give the rollout pool back
            raise

    # ---------------------------------------------------------------------------------------------- rollouter
    def engine_on_actor_ranks(self) -> bool:
        """Only with ``async_training.use_trainer_do_validate`` (:func:`~verl.trainer.config.async_layout.
        engine_on_actor_ranks`); otherwise the trainer's ranks are actors (and reference) only."""
        from verl.trainer.config.async_layout import engine_on_actor_ranks

        return engine_on_actor_ranks(self.config)

    def generate_on_engines(self, gen_batch: DataProto) -> DataProto:
        """The trainer's own generation calls (validation, evaluators): on its ranks' engines with
        ``use_trainer_do_validate``, else on the rollouter's replicas (:meth:`Rollouter.generate`)."""
        if self.engine_on_actor_ranks():
            return super().generate_on_engines(gen_batch)
        self.start_rollouter()
        return self.rollouter.generate(gen_batch)

    def _validate(self) -> dict[str, float]:
        """Validation on the rollouter validates the weights it holds: the last push. The last step pushes its
        weights first (no rollout follows it, so the staleness schedule is untouched); mid-run, a ``test_freq``
        that is not a multiple of ``trigger_parameter_sync_step`` validates weights up to that many steps old
        (the config check warns). ``async/val_weight_version`` says which version was validated."""
        if self.engine_on_actor_ranks():
            return super()._validate()
        self.start_rollouter()
        if self.global_steps >= self.total_training_steps and self._pushed_at_step < self.global_steps:
            self._push(self.weight_version + 1)
        metrics = super()._validate()
        if metrics:
            metrics["async/val_weight_version"] = float(self.weight_version)
        return metrics

    def start_rollouter(self) -> None:
        """Start the rollout process and give it the trainer's current weights (version ``weight_version``: 0, or
        the number of pushes before the resumed step)."""
        from verl.trainer.fully_async_policy.rollouter import Rollouter

        if self.rollouter is not None:
            return
        bound = math.ceil((1 + self.staleness_threshold) * self.batches_per_version) + 1
        pool, self._rollout_pool = self._rollout_pool, None  # the rollouter releases it
        self.rollouter = Rollouter(
            self.config,
            self.actor_rollout_wg,
            max_outstanding=bound,
            partial_rollout=self.partial_rollout,
            pool=pool,
        )
        resumed = (self.resumed_state or {}).get("weight_version")
        self.weight_version = int(resumed) if resumed is not None else 0
        # a resumed run has consumed the checkpoint's batches (those in flight at the save are drawn again): the
        # admission count continues from there, or the rule below would admit a whole run's worth at once
        self._issued = self._consumed = self.global_steps * self.require_batches
        self._push(self.weight_version)

    def close_rollouter(self) -> None:
        if self.rollouter is not None:
            self.rollouter.close()
        if self._rollout_pool is not None:  # reserved, but the rollouter never started
            self._rollout_pool.remove()
            self._rollout_pool = None

    def _push(self, version: int) -> float:
        start = time.perf_counter()
        sent = self.rollouter.push_weights(version)
        self.weight_version = version
        self._pushed_at_step = self.global_steps
        self._step_async_metrics["async/param_sync_bytes"] = float(sent)
        return time.perf_counter() - start

    def sync_weights(self) -> float:
        """Push the actor's weights to the rollouter as the next version; returns the seconds it took."""
        return self._push(self.weight_version + 1)

    # ------------------------------------------------------------------------------------------------- queue
    def fill_queue(self) -> None:
        """Submit prompt batches to the rollouter until the staleness rule (module docstring) or the data stops."""
        while self._issued < self.admitted_batches():
            snapshot = {
                "dataloader": copy.deepcopy(self.train_dataloader.state_dict()),
                "epoch": self.data.epoch,
                "gen_calls": self._gen_calls,
                "ledger_batches": self.data.ledger.batches,
            }
            prompts = RayPPOTrainer._next_training_batch(self)
            if prompts is None:
                return
            meta = self.prompt_batch_meta()
            seed = self.config.actor_rollout_ref.rollout.seed
            if seed is not None:
                # numbered as the synchronous trainer numbers its calls
                meta["seed"] = generation_seed(seed, self._gen_calls)
            self._gen_calls += 1
            self._issued += 1
            snapshot["feed_index"] = self._issued
            replay = self.async_skip.load(self._issued) if self.async_skip is not None else None
            if replay is None:
                self.rollouter.submit(prompts, meta)
            else:
                snapshot["replay"] = replay  # the rollouter never sees this batch
            self._inflight.append(snapshot)

    def _next_training_batch(self) -> DataProto | None:
        """Top up the queue; a placeholder for the step when rollouts are in flight (the step's rollout stage waits
        for them, under ``timing_s/gen``), None when the data is exhausted."""
        self.start_rollouter()
        self.fill_queue()
        if not self._inflight:
            return None
        return DataProto(meta_info={"async_rollouts": min(self.require_batches, len(self._inflight))})

    def _rollout(self, batch: DataProto, timing: dict[str, float]) -> DataProto:
        """The oldest finished rollouts (``require_batches`` prompt batches, ``bs * n`` rows each), checked and
        stamped with their staleness (``rollout_staleness`` per row and the ``async/*`` metrics)."""
        count = int(batch.meta_info.get("async_rollouts", 0))
        if count < 1:
            raise RuntimeError("the asynchronous trainer's rollout stage needs the batch of _next_training_batch")
        with marked_timer("gen", timing):
            parts = [self._next_part(self._inflight.popleft()) for _ in range(count)]
        self._consumed += count
        rollouts = parts[0] if len(parts) == 1 else DataProto.concat(parts, meta_info_conflicts="first")
        versions = np.asarray(rollouts.non_tensor_batch["rollout_weight_version"], dtype=np.int64)
        staleness = self.weight_version - versions
        worst = int(staleness.max())
        if worst > self.max_staleness or int(staleness.min()) < 0:
            raise StalenessError(
                f"step {self.global_steps}: a rollout generated with weight version {int(versions.min())} reached "
                f"the trainer at version {self.weight_version} (staleness {worst} > bound {self.max_staleness} of "
                f"async_training.staleness_threshold={self.staleness_threshold})"
            )
        rollouts.non_tensor_batch["rollout_staleness"] = staleness.astype(object)
        # the version the rollout process received with the weights it generated these rows with
        stamp_policy_version(rollouts, versions)
        rollouts, dropped = self.drop_stale_groups(rollouts, staleness)
        if dropped:
            staleness = np.asarray(rollouts.non_tensor_batch["rollout_staleness"], dtype=np.int64)
            versions = np.asarray(rollouts.non_tensor_batch["rollout_weight_version"], dtype=np.int64)
            worst = int(staleness.max())
        prompts = rollouts.batch["prompts"]
        pad = self.tokenizer.pad_token_id
        self.consumed_log.append(
            {
                "step": self.global_steps,
                "versions": versions.tolist(),
                "prompts": [tuple(int(t) for t in row if int(t) != pad) for row in prompts],
            }
        )
        interruptions = sum(int(p.meta_info.get("partial_rollout_interruptions", 0)) for p in parts)
        self._step_async_metrics.update(
            {
                "async/staleness/mean": float(staleness.mean()),
                "async/staleness/max": float(worst),
                "async/staleness/min": float(staleness.min()),
                "async/weight_version": float(self.weight_version),
                "async/queue_in_flight": float(len(self._inflight)),
                "async/partial_rollout_interruptions": float(interruptions),
                "async/dropped_stale_groups": float(dropped),
            }
        )
        for key in ("eos_token_id", "pad_token_id"):
            rollouts.meta_info.pop(key, None)
        return rollouts

    def _next_part(self, snapshot: dict[str, Any]) -> DataProto:
        """The rollouts of one submitted prompt batch: the rollouter's next result (dumped when ``skip.async_rollout``
        lists its feed index), or the replayed dump, stamped as generated with the current weights (upstream
        restamps replayed samples so the off-policy checks keep them)."""
        replay = snapshot.get("replay")
        if replay is None:
            part = self.rollouter.next_result()
            if self.async_skip is not None:
                self.async_skip.dump(int(snapshot["feed_index"]), part)
            return part
        for key in ("rollout_weight_version", "rollout_weight_version_last"):
            if key in replay.non_tensor_batch:
                replay.non_tensor_batch[key] = np.full(len(replay), self.weight_version, dtype=object)
        return replay

    def off_policy_drop_threshold(self) -> int | None:
        """Upstream v0.9's ``trainer.v1.sampler.max_off_policy_threshold`` under ``max_off_policy_strategy=drop``
        in a V1 asynchronous mode: groups staler than it are dropped; None otherwise (``wait`` caps the rollouter's
        lead at the threshold instead, verl/trainer/config/v1_modes.py)."""
        from verl.trainer.config.v1_modes import v1_async_active

        if not v1_async_active(self.config):
            return None
        sampler = self.config.trainer.v1.sampler
        return int(sampler.max_off_policy_threshold) if sampler.max_off_policy_strategy == "drop" else None

    def drop_stale_groups(self, rollouts: DataProto, staleness: np.ndarray) -> tuple[DataProto, int]:
        """Drop every prompt group (rows sharing a ``uid``) holding a row whose staleness ``[rows]`` exceeds
        :meth:`off_policy_drop_threshold` (upstream drops the whole group for one stale trajectory); returns the
        kept rows and the number of groups dropped. Every group stale is an error (nothing left to train on)."""
        threshold = self.off_policy_drop_threshold()
        if threshold is None or int(staleness.max()) <= threshold:
            return rollouts, 0
        uids = np.asarray(rollouts.non_tensor_batch["uid"], dtype=object)
        stale = {uid for uid, s in zip(uids, staleness) if int(s) > threshold}
        keep = np.asarray([uid not in stale for uid in uids])
        if not keep.any():
            raise StalenessError(
                f"step {self.global_steps}: every group is staler than trainer.v1.sampler.max_off_policy_threshold="
                f"{threshold} (max_off_policy_strategy=drop); lower trainer.v1.*.num_warmup_batches or use wait"
            )
        return rollouts.select_idxs(np.nonzero(keep)[0]), len(stale)

    def train_step(self, batch: DataProto) -> dict[str, float]:
        """The synchronous step on the queued rollouts, then the weight push when one is due."""
        self._step_async_metrics = {}
        metrics = super().train_step(batch)
        due = self.global_steps % self.trigger_parameter_sync_step == 0
        if due and self.global_steps < self.total_training_steps:
            metrics["timing_s/param_sync"] = self.sync_weights()
        metrics.update(self._step_async_metrics)
        return metrics

    # -------------------------------------------------------------------------------------------- checkpoints
    def driver_state(self) -> dict[str, Any]:
        """The synchronous state, with the data position moved back to the oldest batch still in flight: a resumed
        run gives the rollouter those prompt batches again, in the same order, before any new one."""
        from verl.trainer.ppo.resume_check import LEDGER_KEY

        state = super().driver_state()
        if self._inflight:
            oldest = self._inflight[0]
            state.update(
                {"dataloader": oldest["dataloader"], "epoch": oldest["epoch"], "gen_calls": oldest["gen_calls"]}
            )
            state[LEDGER_KEY] = self.data.ledger.state_dict(batches=oldest["ledger_batches"])
        state["weight_version"] = int(self.weight_version)
        return state

    def ledger_batches_per_step(self) -> int:
        """Every step consumes ``require_batches`` loader batches (resume_check.py checks checkpoints by it)."""
        return self.require_batches

    def fit(self) -> dict[str, float]:
        try:
            return super().fit()
        finally:
            self.close_rollouter()
