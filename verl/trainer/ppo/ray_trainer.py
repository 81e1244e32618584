"""The PPO/GRPO driver: ``RayPPOTrainer.fit()`` reads top to bottom like the algorithm.

One step: prompts -> repeat ``rollout.n`` times with a group id ``uid`` -> generate -> reward -> old log-probs ->
reference log-probs (when a KL is used) -> values (PPO) -> KL in reward -> advantages -> update critic -> update
actor -> (the rollout engine follows the actor's weights). The heavy work runs in worker groups; the driver only
moves DataProto batches between them, so the same code runs on the local backend (one process) and on Ray.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from verl.algorithms import core_algos
from verl.algorithms.registry import AdvantageEstimator  # noqa: F401  (verl imports it from here)
from verl.protocol import DataProto
from verl.trainer.config.async_layout import engine_on_actor_ranks
from verl.trainer.config.log_prob_passes import runs_old_log_prob_pass
from verl.trainer.ppo import rollout_correction, sessions
from verl.trainer.ppo.batch_rollout import (
    attach_scores,
    generate_groups,
    generate_rollouts,
    make_agent_loop_manager,
    prompt_meta,
    score_rollouts,
    tag_groups,
)
from verl.trainer.ppo.batch_transforms import (  # noqa: F401  (apply_kl_penalty, compute_advantage: verl's home)
    apply_distillation_reward,
    apply_kl_penalty,
    compute_advantage,
)
from verl.trainer.ppo.driver_checkpoint import DriverCheckpoints
from verl.trainer.ppo.driver_data import DriverData, collect_varied_groups
from verl.trainer.ppo.driver_report import DriverReport
from verl.trainer.ppo.driver_workers import DriverWorkers
from verl.trainer.ppo.invariants import PolicyVersions, VersionedDriver, stamp_policy_version
from verl.trainer.ppo.metric_utils import finished_step_metrics, marked_timer, reduce_metrics
from verl.trainer.ppo.partial_rollout_pool import PartialRolloutPool
from verl.trainer.ppo.rollout_skip import RolloutSkip
from verl.trainer.ppo.spo_driver import SPODriver
from verl.trainer.ppo.utils import (  # noqa: F401  (Role, ResourcePoolManager, compute_response_mask: verl's home)
    ResourcePoolManager,
    Role,
    check_verl_trainer_args,
    compute_response_mask,
)
from verl.trainer.ppo.validation import run_validation
from verl.trainer.ppo.verl_surface import VerlTrainerSurface
from verl.utils.graceful_stop import GracefulStop
from verl.utils.seeding import generation_seed
from verl.utils.torch_functional import masked_mean

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------------- trainer
class RayPPOTrainer(VerlTrainerSurface, VersionedDriver):
    """Driver of PPO-family training (PPO with a critic, GRPO, Dr. GRPO, RLOO, REINFORCE++, ReMax, DAPO settings).

    It holds five parts, each built from what it reads: ``data``
    (:class:`~verl.trainer.ppo.driver_data.DriverData`: datasets, loaders, data position, ledger), ``workers``
    (:class:`~verl.trainer.ppo.driver_workers.DriverWorkers`: the worker groups by role, the agent loops),
    ``checkpoints`` (:class:`~verl.trainer.ppo.driver_checkpoint.DriverCheckpoints`: where, what run, what was
    resumed), ``report`` (:class:`~verl.trainer.ppo.driver_report.DriverReport`: tracking, step hooks, run report)
    and ``versions`` (:class:`~verl.trainer.ppo.invariants.PolicyVersions`: the policy-version check, the log-prob
    gap watch). Upstream verl's attributes and methods that recipes use (``train_dataloader``,
    ``total_training_steps``, ``actor_rollout_wg``, ``_create_dataloader``, ``_save_checkpoint``,
    ``_load_checkpoint``, ``_balance_batch`` ...) are one-line delegations to them
    (:class:`~verl.trainer.ppo.verl_surface.VerlTrainerSurface`).

    ``config`` is the full validated PPO config (verl's keys). Datasets and reward functions are built by
    :func:`verl.trainer.ppo.runner.run_ppo` or passed in by the Python API; ``worker_groups`` lets a caller supply
    already created groups (``{"actor_rollout": wg, "critic": wg, "rm": wg}``), ``role_worker_mapping`` other
    worker classes for those roles (subclasses of the FSDP workers) and ``role_kwargs`` extra constructor arguments
    per role (the Python API's own model objects: ``{"actor_rollout": {"actor_module": model, ...}}``).
    """

    def __init__(
        self,
        config: DictConfig,
        tokenizer,
        reward_fn: Callable | None = None,
        val_reward_fn: Callable | None = None,
        train_dataset=None,
        val_dataset=None,
        collate_fn: Callable | None = None,
        train_sampler=None,
        worker_groups: dict[str, Any] | None = None,
        role_worker_mapping: dict[Any, type] | None = None,
        run_identity: dict[str, Any] | None = None,
        role_kwargs: dict[str, dict[str, Any]] | None = None,
        resource_pool_manager: Any = None,
        ray_worker_group_cls: type | None = None,
        processor: Any = None,
        device_name: str | None = None,
        agent_tools: list[Any] | None = None,
    ):
        from verl.trainer.config import critic_enabled, need_reference_policy
        from verl.trainer.ppo.run_identity import ppo_run_identity

        self.config = config
        self.tokenizer = tokenizer
        self.processor = processor  # a vision-language model's processor (the datasets already hold it)
        self.reward_fn = reward_fn
        self.val_reward_fn = val_reward_fn or reward_fn
        self.use_critic = critic_enabled(config)
        self.use_reference_policy = need_reference_policy(config)
        self.use_rm = bool(config.reward_model.enable)
        # on-policy distillation (distillation.enable): a teacher worker group scores the actor's tokens
        self.use_teacher = bool(OmegaConf.select(config, "distillation.enable"))  # absent (a partial config): off
        # an LLM judge reward on a judge worker group (reward_model.judge.backend=worker)
        judge_backend = OmegaConf.select(config, "reward_model.judge.backend", default=None)
        self.use_judge_worker = config.reward_model.reward_manager == "judge" and judge_backend == "worker"
        self.algorithm = config.algorithm
        self.rollout_skip = RolloutSkip.from_config(config)  # skip.rollout (upstream v0.9): replay dumped rollouts
        self.kl_ctrl_in_reward = (
            core_algos.get_kl_controller(config.algorithm.kl_ctrl) if config.algorithm.use_kl_in_reward else None
        )
        self.n_ranks = int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node)
        self.global_steps = 0
        self.namespace = config.trainer.namespace
        run_dir = self._namespaced(config.trainer.default_local_dir)
        self.data = DriverData(config.data, config.trainer, train_dataset, val_dataset, collate_fn, train_sampler)
        self.data.partial = PartialRolloutPool.from_config(config, tokenizer)  # async_training.partial_rollout
        self.data.spo = SPODriver.from_config(config, tokenizer)  # algorithm.spo: prompt values, priority draws
        self.checkpoints = DriverCheckpoints(config.trainer, run_dir, run_identity, lambda: ppo_run_identity(config))
        about = {"algorithm": config.algorithm.adv_estimator, "n_ranks": self.n_ranks}
        about["actor_dtype"] = config.actor_rollout_ref.actor.dtype
        self.report = DriverReport(config.trainer, run_dir, self.namespace, config, tokenizer, about)
        self.versions = PolicyVersions.from_trainer_config(config.trainer)  # invariants.py
        from verl.hardware.profiler import StepProfiler
        from verl.trainer.ppo.role_profiler import RoleProfiler

        self.profiler = StepProfiler.from_config(config.trainer, os.path.join(run_dir, "profile"))
        self.role_profiler = RoleProfiler.from_config(config)  # global_profiler + <role>.profiler (upstream v0.9)
        self.debug_dir = os.path.join(run_dir, "debug") if config.trainer.enable_debug_mode else None
        # verl's constructor arguments: pools from a ResourcePoolManager; the rest must match what this trainer does
        check_verl_trainer_args(config, ray_worker_group_cls, processor, device_name)
        used = {"reference": self.use_reference_policy, "critic": self.use_critic, "reward_model": self.use_rm}
        used.update(teacher=self.use_teacher, judge=self.use_judge_worker, rollout=engine_on_actor_ranks(config))
        self.workers = DriverWorkers(
            config,
            used,
            worker_groups,
            role_worker_mapping,
            role_kwargs,
            resource_pool_manager,
            agent_tools,
            name_prefix=f"{self.namespace}_" if self.namespace else "verl_",
        )
        self.evaluators: list[Any] = []
        self.val_history: list[tuple[int, dict[str, float]]] = []
        # generation calls so far; checkpointed, so a resumed run seeds its samples as an uninterrupted one
        self._gen_calls = 0
        # "SIGTERM" / "SIGINT" when the last fit() stopped early on that signal (after saving), else None
        self.stopped_by: str | None = None
        from verl.trainer.ppo.run_health import RewardHealth, ToolUseHealth

        self.reward_health = RewardHealth(int(config.trainer.max_degenerate_reward_steps))
        self.tool_health = ToolUseHealth.from_config(config)  # agent runs with tools that never call one: said
        if train_dataset is not None:
            self._create_dataloaders()

    # -------------------------------------------------------------------------------------------------- fit
    def fit(self) -> dict[str, float]:
        """The training loop. Returns the last validation metrics (empty when there is no validation set)."""
        from verl.checkpoint.layout import prepare_checkpoint_root
        from verl.reporting import ProgressBar

        cfg = self.config.trainer
        test_freq = int(cfg.test_freq)
        prepare_checkpoint_root(self.checkpoint_dir, str(cfg.resume_mode), overwrite=bool(cfg.overwrite_checkpoints))
        self.load_checkpoint()
        self.report.begin(self.global_steps, self.resumed_from is not None, self.total_training_steps)
        # shown from here: step N/M, the phase (validation before training included), tokens/s, time left
        progress = ProgressBar(total=self.total_training_steps, initial=self.global_steps)
        val_metrics: dict[str, float] = {}
        saved_at = self.global_steps  # a resumed step is already on disk
        self.stopped_by, failure = None, None
        try:
            if cfg.val_before_train and self.global_steps == 0:
                val_metrics = self._timed_validate()
                self._log(val_metrics, step=0)
                if cfg.val_only:
                    return val_metrics
            with GracefulStop("PPO") as stop:
                while self.global_steps < self.total_training_steps and not stop.requested:
                    batch = self._next_training_batch()
                    if batch is None:
                        break
                    metrics = self.step(batch)
                    is_last = self.global_steps >= self.total_training_steps
                    if test_freq > 0 and (is_last or self.global_steps % test_freq == 0):
                        val_metrics = self._timed_validate()
                        metrics.update(val_metrics)
                    if self.checkpoints.due(self.global_steps, is_last, stop.requested):
                        metrics["timing_s/save_checkpoint"] = self._timed_save()
                        saved_at = self.global_steps
                    for evaluator in self.evaluators:
                        metrics.update(evaluator.evaluate(self))
                    metrics["training/global_step"], metrics["training/epoch"] = self.global_steps, self.data.epoch
                    self._log(metrics, step=self.global_steps)
                    progress.update(metrics)
                    if saved_at == self.global_steps:  # metrics.png and report.html follow each checkpoint
                        self.update_report()
            if stop.requested:
                self.stopped_by = stop.signal_name
                self.checkpoints.say_stopped(stop.signal_name, self.global_steps, saved_at)
        except BaseException as err:
            failure = f"{type(err).__name__}: {err}"  # the report says the run failed, and why
            raise
        finally:
            progress.close()
            self.report.end(self.global_steps, stopped_by=self.stopped_by, error=failure)
        return val_metrics

    def _timed_save(self) -> float:
        timing: dict[str, float] = {}
        with marked_timer("save_checkpoint", timing):
            self.save_checkpoint()
        return timing["save_checkpoint"]

    def _timed_validate(self) -> dict[str, float]:
        timing: dict[str, float] = {}
        with marked_timer("testing", timing):
            metrics = self._validate()
        if metrics:
            metrics["timing_s/testing"] = timing["testing"]
            self.val_history.append((self.global_steps, dict(metrics)))
        return metrics

    # ---------------------------------------------------------------------------------------------- one step
    def prompt_batch_meta(self) -> dict[str, Any]:
        """The meta of this step's generation calls (stop and pad ids, the step)."""
        return prompt_meta(self.tokenizer, self.global_steps)

    def generate(self, gen_batch: DataProto) -> DataProto:
        """Generate where this driver generates (:meth:`generate_on_engines`). With ``rollout.seed``, call ``i`` of
        the run samples with seed ``rollout.seed + i`` (:func:`~verl.utils.seeding.generation_seed`), numbered by the
        driver, not the engine: the count is checkpointed, so a resumed run draws the samples the uninterrupted one
        drew."""
        seed = self.config.actor_rollout_ref.rollout.seed
        if seed is not None and gen_batch.meta_info.get("seed") is None:
            gen_batch.meta_info["seed"] = generation_seed(seed, self._gen_calls)
        self._gen_calls += 1
        return self.generate_on_engines(gen_batch)

    def generate_on_engines(self, gen_batch: DataProto) -> DataProto:
        """``gen_batch`` (prompts already repeated, its ``meta_info`` the call's sampling) -> rollouts, on the
        engines of the actor's ranks (the hybrid engine)."""
        return generate_rollouts(self.actor_rollout_wg, self.workers.agent_loop_manager, gen_batch)

    def generate_groups(self, prompts: DataProto, n: int | None = None, **meta: Any) -> DataProto:
        """Prompts ``[bs, prompt_len]`` -> ``bs * n`` rollouts (default ``rollout.n``), each prompt's group tagged
        with its ``uid`` (:func:`verl.trainer.ppo.batch_rollout.generate_groups`); ``meta`` (``do_sample=False``,
        ``validate=True``, ``temperature=0.7`` ...) sets this call's sampling."""
        from verl.experimental.agent_loop.judge_overlap import judge_overlap_config

        n = int(self.config.actor_rollout_ref.rollout.n if n is None else n)
        # a judge scoring trajectories during the rollout reads the ground truths there
        columns = ("reward_model",) if judge_overlap_config(self.config) is not None else ()
        return generate_groups(prompts, n, self.generate, {**self.prompt_batch_meta(), **meta}, columns)

    def score(
        self, rollouts: DataProto, reward_fn: Callable[..., Any] | None = None
    ) -> tuple[DataProto, torch.Tensor, dict[str, list]]:
        """Reward-model scores (when enabled) then the reward function's (default: the training one) token-level
        scores ``[bs, response_len]`` and extras (:func:`verl.trainer.ppo.batch_rollout.score_rollouts`)."""
        reward_model = self.workers.rm if self.use_rm else None
        return score_rollouts(rollouts, reward_fn or self.reward_fn, reward_model)

    def _rollout(self, batch: DataProto, timing: dict[str, float]) -> DataProto:
        """Repeat prompts ``rollout.n`` times with a group id ``uid`` and generate (plus ReMax greedy baselines:
        the scores of a greedy response to the same prompt, ``reward_baselines [bs * n]``). On a step of
        ``skip.rollout.steps`` the dumped rollouts replay instead (:mod:`verl.trainer.ppo.rollout_skip`); with
        synchronous partial rollouts the pool's first groups to complete (:mod:`~.partial_rollout_pool`)."""
        if self.data.partial is not None:
            with marked_timer("gen", timing):
                return self.data.partial.step_rollouts(
                    batch, self.data.next_loader_batch, self.generate, self.prompt_batch_meta(),
                    self.current_policy_version(), self.actor_rollout_wg.world_size,
                )  # fmt: skip
        if self.rollout_skip is not None:
            replayed = self.rollout_skip.load(self.global_steps)
            if replayed is not None:  # replayed as generated now (upstream restamps replayed samples)
                return stamp_policy_version(replayed, self.current_policy_version())
        tag_groups(batch)
        with marked_timer("gen", timing):
            rollouts = self.generate_groups(batch)
        if self.algorithm.adv_estimator == core_algos.AdvantageEstimator.REMAX:
            with marked_timer("gen_max", timing):
                baseline, baseline_scores, _ = self.score(self.generate_groups(batch, do_sample=False))
                rollouts.batch["reward_baselines"] = sessions.baselines_per_row(rollouts, baseline, baseline_scores)
        if self.rollout_skip is not None:
            self.rollout_skip.dump(self.global_steps, rollouts)
        return stamp_policy_version(rollouts, self.current_policy_version())  # the weights that generated them

    def _rollout_and_score(self, batch: DataProto, timing: dict[str, float], metrics: dict[str, Any]) -> DataProto:
        """Generate and attach ``token_level_scores`` synchronously."""
        batch = self._rollout(batch, timing)
        with marked_timer("reward", timing):
            batch, scores, extra = self.score(batch)
        return attach_scores(batch, scores, extra, metrics)

    @contextlib.contextmanager
    def next_step(self) -> Iterator[int]:
        """The one place the step counter advances: ``global_steps + 1`` for the body (which yields it), traced by
        the step profiler when that step is selected, the reference refreshed first when due (``ref_update_freq``).
        For callers that run a step's stages themselves (the Python API's pipelines); :meth:`step` runs a whole one."""
        self.global_steps += 1
        self.data.ledger.record_step(self.global_steps)  # never repeated, never counted twice: StepCounterError
        self.workers.refresh_reference(self.global_steps)
        with self.profiler.step(self.global_steps), self.role_profiler.step(self.global_steps, self.workers.groups):
            yield self.global_steps

    def step(self, batch: DataProto) -> dict[str, float]:
        """The next training step on a prompt batch: advances ``global_steps``, runs :meth:`train_step` under the
        step profiler (``trainer.enable_profiling``/``profile_steps``) and writes the debug dump
        (``trainer.enable_debug_mode``). :meth:`fit` and the Python API's ``PPOTrainer.step`` both call this."""
        with self.next_step():
            metrics = self.train_step(batch)
        # every score equal because the reward failed: said now; DegenerateRewardError after
        # trainer.max_degenerate_reward_steps such steps in a row (verl/trainer/ppo/run_health.py)
        self.reward_health.observe_batch(self.global_steps, getattr(self, "last_batch", None))
        self.tool_health.observe_metrics(self.global_steps, metrics)
        self.versions.observe(self.global_steps, metrics)  # rollout vs trainer log-probs (invariants.py)
        if self.debug_dir is not None:
            from verl.hardware.profiler import dump_step_debug

            dump_step_debug(self.last_batch, metrics, self.debug_dir, self.global_steps)
        return metrics

    def train_step(self, batch: DataProto) -> dict[str, float]:
        """One full PPO iteration on a batch of prompts; returns the step's metrics."""
        timing: dict[str, float] = {}
        metrics: dict[str, Any] = {}
        with marked_timer("step", timing):
            batch, reward_future = self.rollout_stage(batch, timing, metrics)
            batch = self.update_stage(batch, timing, metrics, reward_future)
        metrics.update(self.batch_metrics(batch, timing))
        self.report.record_samples(batch, self.global_steps, self.total_training_steps)
        return metrics

    def rollout_stage(
        self, batch: DataProto, timing: dict[str, float], metrics: dict[str, Any]
    ) -> tuple[DataProto, Future | None]:
        """Generate ``rollout.n`` responses per prompt, balance ranks, and score them (or start scoring in the
        background when ``reward_model.launch_reward_fn_async``: the future is resolved by :meth:`update_stage`)."""
        reward_future = None
        if self.data.spo is not None:  # SPO: train_batch_size prompts of the loader's batch, drawn by priority
            batch, spo_metrics = self.data.spo.select(batch, self.global_steps)
            metrics.update(spo_metrics)
        if self.algorithm.filter_groups.enable:  # DAPO: generate until enough groups have varied rewards
            batch = collect_varied_groups(
                batch,
                lambda prompts: self._rollout_and_score(prompts, timing, metrics),
                self._next_training_batch,
                self.algorithm.filter_groups,
                int(self.config.data.train_batch_size),
                int(self.config.actor_rollout_ref.rollout.n),
                self.actor_rollout_wg.world_size,
                metrics,
            )
        elif self.config.reward_model.launch_reward_fn_async and not self.use_rm:
            batch = self._rollout(batch, timing)
        else:
            batch = self._rollout_and_score(batch, timing, metrics)
        batch.meta_info["global_steps"] = self.global_steps
        metrics.update(self.data.partial.last_metrics if self.data.partial is not None else {})  # partial rollouts
        critic_ranks = [self.critic_wg.world_size] if self.use_critic else []  # segment rows: pad to split evenly
        batch = sessions.pad_segment_rows(batch, self.actor_rollout_wg.world_size, *critic_ranks)
        if self.config.trainer.balance_batch:
            self._balance_batch(batch, metrics)
        batch.meta_info["global_token_num"] = batch.batch["attention_mask"].sum(-1).tolist()
        if "token_level_scores" not in batch.batch.keys():
            from verl.trainer.ppo.reward import compute_reward_async

            reward_future = compute_reward_async(batch.select(deepcopy=True), self.reward_fn)
        return batch, reward_future

    def update_stage(
        self,
        batch: DataProto,
        timing: dict[str, float],
        metrics: dict[str, Any],
        reward_future: Future | None = None,
    ) -> DataProto:
        """The post-rollout half of a step on scored (or being scored) rollouts: old log-probs (the rollout's in
        ``algorithm.rollout_correction.bypass_mode``), rollout correction (importance weights, rejection and the
        ``rollout_corr/*`` metrics), reference log-probs, values, KL in reward, advantages, critic update, actor
        update."""
        batch.meta_info["global_steps"] = self.global_steps
        batch.meta_info.setdefault("global_token_num", batch.batch["attention_mask"].sum(-1).tolist())
        metrics.update(self.check_consumed_versions(batch))  # StalenessError: not the weights that train on it
        correction = self.algorithm.get("rollout_correction")
        bypass = rollout_correction.bypass_mode(correction)
        after_warmup = int(self.config.trainer.critic_warmup) <= self.global_steps
        on_policy = not runs_old_log_prob_pass(self.config, after_critic_warmup=after_warmup)
        batch.meta_info["on_policy"] = not bypass and on_policy and sessions.single_mini_batch(batch, self.config)
        if bypass:
            batch = rollout_correction.use_rollout_as_old(batch, correction)
        elif not batch.meta_info["on_policy"]:
            with marked_timer("old_log_prob", timing):
                old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)
                if "entropys" in old_log_prob.batch.keys():
                    entropys = old_log_prob.batch.pop("entropys")
                    metrics["actor/entropy"] = masked_mean(entropys, batch.batch["response_mask"]).item()
                batch = batch.union(old_log_prob)
        metrics.update(rollout_correction.apply_rollout_correction(batch, correction))
        batch.meta_info["log_prob_gap"] = self.versions.wants_actor_log_prob_gap(batch, metrics)  # by the actor
        if self.use_reference_policy:
            with marked_timer("ref", timing):
                batch = batch.union(self.actor_rollout_wg.compute_ref_log_prob(batch))
        if self.use_teacher:
            with marked_timer("teacher", timing):
                batch = batch.union(self.workers.teacher.compute_teacher_log_prob(batch))
        if self.use_critic:
            with marked_timer("values", timing):
                batch = batch.union(self.critic_wg.compute_values(batch))
        if reward_future is not None:
            with marked_timer("reward", timing):
                scores, extra = reward_future.result()
            batch = attach_scores(batch, scores, extra, metrics)
        if "token_level_scores" not in batch.batch.keys():
            raise ValueError("update_stage needs scored rollouts (token_level_scores): score the batch first")

        with marked_timer("adv", timing):
            if self.use_teacher:
                dcfg = self.config.distillation
                dloss = dcfg.distillation_loss
                batch, distill_metrics = apply_distillation_reward(
                    batch, float(dcfg.coef), float(dcfg.task_reward_weight), dloss.loss_mode, dloss.loss_max_clamp
                )
                metrics.update(distill_metrics)
            if self.kl_ctrl_in_reward is not None:
                batch, kl_metrics = apply_kl_penalty(batch, self.kl_ctrl_in_reward, self.algorithm.kl_penalty)
                metrics.update(kl_metrics)
            else:
                batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
            if self.data.spo is not None:  # each row's prompt value, the baseline of adv_estimator=spo
                metrics.update(self.data.spo.attach_values(batch))
            # a trajectory that gave several rows: GRPO from its final one (upstream's v1 multi-trajectory rule)
            batch = sessions.multi_trajectory_advantage(batch, self.algorithm)

        if self.use_critic:
            with marked_timer("update_critic", timing):
                metrics.update(reduce_metrics(self.critic_wg.update_critic(batch).meta_info["metrics"]))
        if int(self.config.trainer.critic_warmup) <= self.global_steps:
            with marked_timer("update_actor", timing):
                metrics.update(reduce_metrics(self.actor_rollout_wg.update_actor(batch).meta_info["metrics"]))
        if (spo := self.data.spo) is not None:  # the step's outcomes into the prompt values, discounted by the drift
            with marked_timer("spo", timing):
                metrics.update(spo.advantage_metrics(batch) | spo.observe(batch, self.actor_rollout_wg))
        if self.config.trainer.rollout_data_dir:
            self.report.dump_rollouts(batch, self.global_steps)
        self.last_batch = batch
        return batch

    def batch_metrics(self, batch: DataProto, timing: dict[str, float]) -> dict[str, float]:
        """Data, reward extras, timing, throughput and memory metrics of a finished step (verl's names)."""
        return finished_step_metrics(batch, timing, self.use_critic, self.n_ranks)

    # ------------------------------------------------------------------------------------------- validation
    def _validate(self) -> dict[str, float]:
        """Greedy (``rollout.val_kwargs``) generation on the validation set; ``val-core/<source>/reward/mean@N``
        (upstream's name)."""
        return run_validation(self)

    # ------------------------------------------------------------------------------------------------- set-up
    def _namespaced(self, path: str) -> str:
        from verl.utils.fs import namespaced_path

        return namespaced_path(path, self.namespace)

    def worker_roles(self) -> dict[str, tuple[type, dict[str, Any]]]:
        """Role -> (worker class, constructor arguments) of this run (:meth:`DriverWorkers.roles`)."""
        return self.workers.roles()

    def init_workers(self) -> None:
        """Create the worker groups and load the models (:meth:`DriverWorkers.start`), then the agent loops."""
        # schedulers need the horizon before the optimizers are built; without a dataset (the Python API brings its
        # own batches) it is the configured step budget
        self.workers.start(self.total_training_steps or int(self.config.trainer.total_training_steps or 1))
        workers = self.workers
        if workers.used["rollout"]:  # else the rollouter's replicas run the agent loops
            workers.agent_loop_manager = make_agent_loop_manager(
                self.config, self.tokenizer, workers.actor, workers.agent_tools
            )
        if workers.judge is not None:  # the reward functions were built before the workers: hand them the group
            from verl.workers.reward_manager.judge import bind_judge_worker_group

            bind_judge_worker_group(workers.judge, self.reward_fn, self.val_reward_fn)

    def release_rollout(self) -> None:
        """Stop the rollout engines before the worker processes go away (:meth:`DriverWorkers.release_rollout`)."""
        self.workers.release_rollout()

    # -------------------------------------------------------------------------------------------------- data
    def _create_dataloaders(self) -> None:
        """The loaders and ``total_training_steps`` (:meth:`DriverData.create_dataloaders`; the asynchronous
        trainers extend it: their step consumes several loader batches)."""
        self.data.create_dataloaders()

    def _next_training_batch(self) -> DataProto | None:
        """The next prompt batch (:meth:`DriverData.next_batch`); None when the epochs are done."""
        return self.data.next_batch()

    def ledger_batches_per_step(self) -> int | None:
        """Loader batches one training step consumes (what :func:`~verl.trainer.ppo.resume_check.verify_resume`
        checks a checkpoint against): 1, or None (at least one) with dynamic sampling
        (``algorithm.filter_groups.enable``), which draws until enough groups have varied rewards."""
        return None if self.algorithm.filter_groups.enable or self.data.partial is not None else 1

    # ------------------------------------------------------------------------------------------- checkpoints
    def _checkpointed_groups(self) -> dict[str, Any]:
        """The worker groups a checkpoint holds, by subdirectory: the actor, and the critic when trained."""
        return {"actor": self.actor_rollout_wg, **({"critic": self.critic_wg} if self.use_critic else {})}

    def driver_state(self) -> dict[str, Any]:
        """``data.pt``: the step, the data position (epoch, loader, ledger), generation counter and KL coefficient."""
        from verl.trainer.ppo.resume_check import check_step_counter

        check_step_counter(self.global_steps, self.data.ledger.steps)
        state: dict[str, Any] = {"global_steps": self.global_steps, "gen_calls": self._gen_calls}
        state.update(self.data.state_dict())
        if self.kl_ctrl_in_reward is not None:
            state["kl_coef"] = float(self.kl_ctrl_in_reward.value)
        return state

    def save_checkpoint(
        self, path: str | None = None, save_contents: list[str] | None = None, extra_state: dict[str, Any] | None = None
    ) -> str:
        """Write ``global_step_N/{actor,critic}`` and ``data.pt`` (:meth:`driver_state` plus ``extra_state``: plain
        types and tensors) atomically and mark it complete (:meth:`DriverCheckpoints.save`: ``path`` None keeps the
        tracker and retention; ``save_contents`` selects what the workers write)."""
        saved = self.checkpoints.save(
            self.global_steps,
            self._checkpointed_groups(),
            lambda: {**self.driver_state(), **(extra_state or {})},
            path=path,
            save_contents=save_contents,
        )
        if path is None and not self.report.in_fit:  # (the Python API) fit() updates it once the step is logged
            self.update_report()
        return saved

    def load_checkpoint(self, path: str | None = None, mode: str = "resume_path") -> int:
        """Resume from ``path`` or, when None, per ``trainer.resume_mode`` (:meth:`DriverCheckpoints.find`); returns
        the restored step (0 when starting fresh). Restores the data position (checked against the ledger), the
        workers (weights, optimizer, lr scheduler, RNG), the step, the generation counter and the KL coefficient;
        the whole ``data.pt`` dict stays in :attr:`resumed_state`."""
        found = self.checkpoints.find(path, mode)
        if found is None:
            return 0
        path, state = found
        self.data.load_state_dict(state, path, self.ledger_batches_per_step())  # before the weights: one line
        self.checkpoints.load_workers(path, self._checkpointed_groups())
        self.global_steps = int(state["global_steps"])
        self._gen_calls = int(state.get("gen_calls", self._gen_calls))
        if self.kl_ctrl_in_reward is not None and "kl_coef" in state:
            self.kl_ctrl_in_reward.value = state["kl_coef"]
        self.checkpoints.mark_resumed(path, state, self.data.epoch)
        return self.global_steps

    def export_hf(self, target_dir: str) -> str:
        """Export the actor of the newest checkpoint as a Hugging Face directory (LoRA merged)."""
        from verl.model_merger import merge_checkpoint

        step_dir = self.checkpoints.step_dir(self.global_steps)
        if not os.path.isdir(step_dir):
            step_dir = self.save_checkpoint()
        merge_checkpoint(os.path.join(step_dir, "actor"), target_dir)
        return target_dir

    # ------------------------------------------------------------------------------------ report and versions
    def _log(self, metrics: dict[str, float], step: int) -> None:
        self.report.log(metrics, step)

    def reporter(self) -> Any:
        """The run's :class:`~verl.reporting.report.RunReporter`; None when ``trainer.plot`` and the report are off."""
        return self.report.reporter(self.total_training_steps)

    def update_report(self, status: str | None = None, redraw_plot: bool = True) -> None:
        """Redraw ``metrics.png`` and rebuild ``report.html`` now (:meth:`DriverReport.update`)."""
        self.report.update(self.global_steps, status, redraw_plot)
