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
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from verl.algorithms import core_algos
from verl.algorithms.registry import AdvantageEstimator  # noqa: F401  (verl imports it from here)
from verl.protocol import DataProto
from verl.trainer.config.log_prob_passes import runs_old_log_prob_pass
from verl.trainer.ppo import rollout_correction
from verl.trainer.ppo.batch_rollout import (
    attach_scores,
    decode_generations,
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
from verl.trainer.ppo.driver_checkpoint import DriverCheckpointMixin
from verl.trainer.ppo.driver_data import DriverDataMixin
from verl.trainer.ppo.driver_report import DriverReportMixin
from verl.trainer.ppo.invariants import LogProbGapWatch, PolicyVersionMixin, stamp_policy_version
from verl.trainer.ppo.metric_utils import (
    compute_data_metrics,
    compute_reward_extra_metrics,
    compute_throughput_metrics,
    compute_timing_metrics,
    marked_timer,
    memory_metrics,
    reduce_metrics,
)
from verl.trainer.ppo.rollout_skip import RolloutSkip
from verl.trainer.ppo.utils import (  # noqa: F401  (Role, ResourcePoolManager, compute_response_mask: verl's home)
    ResourcePoolManager,
    Role,
    check_verl_trainer_args,
    compute_response_mask,
    normalize_role_worker_mapping,
)
from verl.trainer.ppo.validation import run_validation
from verl.trainer.ppo.worker_roles import pool_settings, worker_roles
from verl.utils.graceful_stop import GracefulStop
from verl.utils.logging_utils import console_write
from verl.utils.seeding import generation_seed
from verl.utils.torch_functional import masked_mean

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------------- trainer
class RayPPOTrainer(DriverDataMixin, DriverCheckpointMixin, DriverReportMixin, PolicyVersionMixin):
    """Driver of PPO-family training (PPO with a critic, GRPO, Dr. GRPO, RLOO, REINFORCE++, ReMax, DAPO settings).

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

        self.config = config
        self.tokenizer = tokenizer
        self.processor = processor  # a vision-language model's processor (the datasets already hold it)
        self.reward_fn = reward_fn
        self.val_reward_fn = val_reward_fn or reward_fn
        self.train_dataset = train_dataset
        self.val_dataset = val_dataset
        self.collate_fn = collate_fn
        self.train_sampler = train_sampler
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
        self.checkpoint_dir = self._namespaced(config.trainer.default_local_dir)
        from verl.hardware.profiler import StepProfiler
        from verl.trainer.ppo.role_profiler import RoleProfiler

        self.profiler = StepProfiler.from_config(config.trainer, os.path.join(self.checkpoint_dir, "profile"))
        self.role_profiler = RoleProfiler.from_config(config)  # global_profiler + <role>.profiler (upstream v0.9)
        debug = config.trainer.enable_debug_mode
        self.debug_dir = os.path.join(self.checkpoint_dir, "debug") if debug else None
        self.worker_groups = worker_groups or {}
        # role ("actor_rollout", "critic", "rm") -> worker class, replacing the FSDP worker of that role (verl's name)
        self.role_worker_mapping = normalize_role_worker_mapping(role_worker_mapping)  # verl's Role keys too
        # verl's constructor arguments: pools from a ResourcePoolManager; the rest must match what this trainer does
        self.resource_pool_manager = resource_pool_manager
        check_verl_trainer_args(config, ray_worker_group_cls, processor, device_name)
        self.role_kwargs = {role: dict(kwargs) for role, kwargs in (role_kwargs or {}).items()}
        self.agent_tools = list(agent_tools or [])  # the Python API's tools, for the agent loops (init_workers)
        self.agent_loop_manager: Any = None  # the driver's agent loops when rollout.multi_turn.enable
        self.evaluators: list[Any] = []
        self.val_history: list[tuple[int, dict[str, float]]] = []
        self.step_hooks: list[Callable[[int, dict[str, float]], None]] = []
        self.train_dataloader = None
        self.val_dataloader = None
        self.total_training_steps = 0
        self._tracker = None
        self._data_iter: Iterator | None = None
        self._epoch = 0
        from verl.trainer.ppo.resume_check import DataLedger

        # every consumed prompt index and the step count, checked at each step and on resume (resume_check.py)
        self.data_ledger = DataLedger()
        # generation calls so far; checkpointed, so a resumed run seeds its samples as an uninterrupted one
        self._gen_calls = 0
        # the driver state (data.pt) of the checkpoint load_checkpoint restored, None when none was
        self.resumed_state: dict[str, Any] | None = None
        # the checkpoint directory load_checkpoint restored, None when the run started fresh
        self.resumed_from: str | None = None
        # what this run's checkpoints are of (model, algorithm, roles, LoRA rank; verl/checkpoint/identity.py):
        # recorded in each completion marker, compared before each resume; None: derived from the config when needed
        self.run_identity: dict[str, Any] | None = run_identity
        self._root_checked = False  # the checkpoint root holds no other run's checkpoints (checked at first save)
        # "SIGTERM" / "SIGINT" when the last fit() stopped early on that signal (after saving), else None
        self.stopped_by: str | None = None
        # metrics.png / report.html of the run (verl/reporting/report): created on first use, None when both
        # are off
        self._reporter: Any = None
        self._in_fit = False  # inside fit(), the report follows the step's metrics row, not the save itself
        from verl.trainer.ppo.run_health import RewardHealth, ToolUseHealth

        self.reward_health = RewardHealth(int(config.trainer.max_degenerate_reward_steps))
        self.tool_health = ToolUseHealth.from_config(config)  # agent runs with tools that never call one: said
        self.log_prob_gap_watch = LogProbGapWatch.from_config(config)  # rollout vs trainer log-probs (invariants.py)
        if train_dataset is not None:
            self._create_dataloaders()

    # ------------------------------------------------------------------------------------------------- set-up
    def _namespaced(self, path: str) -> str:
        from verl.utils.fs import namespaced_path

        return namespaced_path(path, self.namespace)

    def worker_roles(self) -> dict[str, tuple[type, dict[str, Any]]]:
        """Role -> (worker class, constructor arguments) of this run (:mod:`verl.trainer.ppo.worker_roles`, the one
        place roles are decided; ``role_worker_mapping`` swaps classes, ``role_kwargs`` adds arguments)."""
        used = {"reference": self.use_reference_policy, "critic": self.use_critic, "reward_model": self.use_rm}
        used.update(teacher=self.use_teacher, judge=self.use_judge_worker)
        return worker_roles(self.config, self.role_worker_mapping, self.role_kwargs, **used)

    def init_workers(self) -> None:
        """Create the worker groups (colocated in one process per rank) and load the models."""
        from verl.single_controller import create_colocated_worker_groups
        from verl.trainer.config.parallel_checks import resolve_backend

        # schedulers need the horizon before the optimizers are built; without a dataset (the Python API brings its
        # own batches) it is the configured step budget
        horizon = self.total_training_steps or int(self.config.trainer.total_training_steps or 1)
        for section in (self.config.actor_rollout_ref.actor.optim, self.config.critic.optim):
            OmegaConf.set_struct(section, False)
            section.total_training_steps = horizon
        if not self.worker_groups:
            roles = self.worker_roles()
            trainer_cfg = self.config.trainer
            self.worker_groups = create_colocated_worker_groups(
                backend=resolve_backend(trainer_cfg),
                roles=roles,
                world_size=self.n_ranks,
                use_gpu=self._use_gpu(),
                name_prefix=self.worker_name_prefix(),
                nnodes=int(trainer_cfg.nnodes),
                # roles on resource pools (verl's mapping); unmapped roles share global_pool, one process per rank
                **pool_settings(self.config.trainer, self.resource_pool_manager),
                placement_timeout_s=float(self.config.ray_kwargs.placement_timeout_s),
            )
        for name in ("critic", "rm", "teacher", "judge", "actor_rollout"):  # actor last: the biggest, as in verl
            if name in self.worker_groups:
                self.worker_groups[name].init_model()
        wg = self.actor_rollout_wg = self.worker_groups["actor_rollout"]
        self.agent_loop_manager = make_agent_loop_manager(self.config, self.tokenizer, wg, self.agent_tools)
        self.critic_wg = self.worker_groups.get("critic")
        self.rm_wg = self.worker_groups.get("rm")
        self.teacher_wg = self.worker_groups.get("teacher")
        self.judge_wg = self.worker_groups.get("judge")
        if self.judge_wg is not None:  # the reward functions were built before the workers: hand them the group
            from verl.workers.reward_manager.judge import bind_judge_worker_group

            bind_judge_worker_group(self.judge_wg, self.reward_fn, self.val_reward_fn)

    def _use_gpu(self) -> bool:
        from verl.utils.device import get_device_name

        return get_device_name(self.config.trainer.device) == "cuda"

    def worker_name_prefix(self) -> str:
        return f"{self.namespace}_" if self.namespace else "verl_"

    # ---------------------------------------------------------------------------------------------- one step
    def prompt_batch_meta(self) -> dict[str, Any]:
        """The meta of this step's generation calls (stop and pad ids, the step)."""
        return prompt_meta(self.tokenizer, self.global_steps)

    def generate(self, gen_batch: DataProto) -> DataProto:
        """Generate through the actor group, or its engines' agent loops (:func:`generate_rollouts`).

        With ``rollout.seed`` set, call ``i`` of the run samples with seed ``rollout.seed + i``
        (:func:`~verl.utils.seeding.generation_seed`). The driver numbers the calls (not the rollout engine) because
        the count is part of the checkpointed driver state: a resumed run then draws exactly the samples the
        uninterrupted run drew.
        """
        seed = self.config.actor_rollout_ref.rollout.seed
        if seed is not None and gen_batch.meta_info.get("seed") is None:
            gen_batch.meta_info["seed"] = generation_seed(seed, self._gen_calls)
        self._gen_calls += 1
        return generate_rollouts(self.actor_rollout_wg, self.agent_loop_manager, gen_batch)

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
        reward_model = self.rm_wg if self.use_rm else None
        return score_rollouts(rollouts, reward_fn or self.reward_fn, reward_model)

    def _rollout(self, batch: DataProto, timing: dict[str, float]) -> DataProto:
        """Repeat prompts ``rollout.n`` times with a group id ``uid`` and generate (plus ReMax greedy baselines:
        the scores of a greedy response to the same prompt, ``reward_baselines [bs * n]``). On a step of
        ``skip.rollout.steps`` the dumped rollouts replay instead (:mod:`verl.trainer.ppo.rollout_skip`)."""
        if self.rollout_skip is not None:
            replayed = self.rollout_skip.load(self.global_steps)
            if replayed is not None:  # replayed as generated now (upstream restamps replayed samples)
                return stamp_policy_version(replayed, self.current_policy_version())
        tag_groups(batch)
        with marked_timer("gen", timing):
            rollouts = self.generate_groups(batch)
        if self.algorithm.adv_estimator == core_algos.AdvantageEstimator.REMAX:
            with marked_timer("gen_max", timing):
                _, baseline_scores, _ = self.score(self.generate_groups(batch, do_sample=False))
                rollouts.batch["reward_baselines"] = baseline_scores.sum(dim=-1)
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
        the step profiler when that step is selected. For callers that run a step's stages themselves (the Python
        API's dataflow pipelines); :meth:`step` runs a whole one."""
        self.global_steps += 1
        self.data_ledger.record_step(self.global_steps)  # never repeated, never counted twice: StepCounterError
        with self.profiler.step(self.global_steps), self.role_profiler.step(self.global_steps, self.worker_groups):
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
        self.log_prob_gap_watch.observe(self.global_steps, metrics)
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
        self._record_report_samples(batch)
        return metrics

    def rollout_stage(
        self, batch: DataProto, timing: dict[str, float], metrics: dict[str, Any]
    ) -> tuple[DataProto, Future | None]:
        """Generate ``rollout.n`` responses per prompt, balance ranks, and score them (or start scoring in the
        background when ``reward_model.launch_reward_fn_async``: the future is resolved by :meth:`update_stage`)."""
        reward_future = None
        if self.algorithm.filter_groups.enable:
            batch = self._collect_filtered_batch(batch, timing, metrics)
        elif self.config.reward_model.launch_reward_fn_async and not self.use_rm:
            batch = self._rollout(batch, timing)
        else:
            batch = self._rollout_and_score(batch, timing, metrics)
        batch.meta_info["global_steps"] = self.global_steps
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
        batch.meta_info["on_policy"] = not bypass and not runs_old_log_prob_pass(
            self.config, after_critic_warmup=int(self.config.trainer.critic_warmup) <= self.global_steps
        )
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
        batch.meta_info["log_prob_gap"] = self.wants_actor_log_prob_gap(batch, metrics)  # measured by the actor
        if self.use_reference_policy:
            with marked_timer("ref", timing):
                batch = batch.union(self.actor_rollout_wg.compute_ref_log_prob(batch))
        if self.use_teacher:
            with marked_timer("teacher", timing):
                batch = batch.union(self.teacher_wg.compute_teacher_log_prob(batch))
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
            batch = compute_advantage(batch, self.algorithm.adv_estimator, self.algorithm)

        if self.use_critic:
            with marked_timer("update_critic", timing):
                metrics.update(reduce_metrics(self.critic_wg.update_critic(batch).meta_info["metrics"]))
        if int(self.config.trainer.critic_warmup) <= self.global_steps:
            with marked_timer("update_actor", timing):
                metrics.update(reduce_metrics(self.actor_rollout_wg.update_actor(batch).meta_info["metrics"]))
        if self.config.trainer.rollout_data_dir:
            self._dump_rollout(batch)
        self.last_batch = batch
        return batch

    def batch_metrics(self, batch: DataProto, timing: dict[str, float]) -> dict[str, float]:
        """Data, reward extras, timing, throughput and memory metrics of a finished step (verl's names)."""
        metrics = compute_data_metrics(batch, use_critic=self.use_critic)
        metrics.update(compute_reward_extra_metrics(batch))
        metrics.update(compute_timing_metrics(batch, timing))
        metrics.update(compute_throughput_metrics(batch, timing, self.n_ranks))
        metrics.update(memory_metrics())
        return metrics

    def _dump_rollout(self, batch: DataProto) -> None:
        from verl.reporting import dump_rollout_jsonl

        prompts, responses, extra = decode_generations(self.tokenizer, batch)
        scores = batch.batch["token_level_scores"].sum(-1).tolist()
        dump_rollout_jsonl(
            self._namespaced(self.config.trainer.rollout_data_dir), self.global_steps, prompts, responses, scores, extra
        )

    # ------------------------------------------------------------------------------------------- validation
    def _validate(self) -> dict[str, float]:
        """Greedy (``rollout.val_kwargs``) generation on the validation set; ``val-core/<source>/reward/mean@N``."""
        return run_validation(self)

    def release_rollout(self) -> None:
        """Stop the rollout engines before the worker processes go away: a vLLM engine then frees its process
        groups and a tensor-parallel CPU engine its shared memory, which killed processes would leave behind. One
        rank runs in this process, whose exit releases its engine: it is left alone."""
        group = self.worker_groups.get("actor_rollout")
        stop = getattr(group, "shutdown_rollout", None)
        if not callable(stop) or int(getattr(group, "world_size", 1)) <= 1:
            return
        try:
            stop()
        except Exception as err:  # noqa: BLE001 - teardown must not hide the run's result
            logger.warning("stopping the rollout engines failed: %s", err)

    # -------------------------------------------------------------------------------------------------- fit
    def fit(self) -> dict[str, float]:
        """The training loop. Returns the last validation metrics (empty when there is no validation set)."""
        from verl.checkpoint.layout import prepare_checkpoint_root
        from verl.reporting import ProgressBar

        trainer_cfg = self.config.trainer
        prepare_checkpoint_root(
            self.checkpoint_dir,
            str(trainer_cfg.resume_mode),
            overwrite=bool(trainer_cfg.overwrite_checkpoints),
        )
        self.load_checkpoint()
        # rows of steps after the resumed one are dropped from the JSONL log: those steps run again
        self._tracker = self._make_tracker(keep_through_step=self.global_steps if self.resumed_from else -1)
        reporter = self.reporter()
        if reporter is not None:
            reporter.start(resumed_step=self.global_steps if self.resumed_from else None)
        val_metrics: dict[str, float] = {}
        # shown from here: step N/M, the phase (validation before training included), tokens/s, time left
        progress = ProgressBar(total=self.total_training_steps, initial=self.global_steps)
        if trainer_cfg.val_before_train and self.global_steps == 0:
            try:
                val_metrics = self._timed_validate()
            except BaseException:
                progress.close()
                raise
            self._log(val_metrics, step=0)
            if trainer_cfg.val_only:
                progress.close()
                self._tracker.finish()
                if reporter is not None:
                    reporter.finish(self.global_steps)
                return val_metrics
        save_freq, test_freq = int(trainer_cfg.save_freq), int(trainer_cfg.test_freq)
        saved_at = self.global_steps  # a resumed step is already on disk
        self.stopped_by = None
        self._in_fit = True
        failure: str | None = None
        try:
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
                    due = (save_freq > 0 and self.global_steps % save_freq == 0) or (is_last and save_freq != 0)
                    # a stop request saves the step just finished (unless saving is off: save_freq=0)
                    if due or (stop.requested and save_freq != 0):
                        timing: dict[str, float] = {}
                        with marked_timer("save_checkpoint", timing):
                            self.save_checkpoint()
                        saved_at = self.global_steps
                        metrics["timing_s/save_checkpoint"] = timing["save_checkpoint"]
                    for evaluator in self.evaluators:
                        metrics.update(evaluator.evaluate(self))
                    metrics["training/global_step"] = self.global_steps
                    metrics["training/epoch"] = self._epoch
                    self._log(metrics, step=self.global_steps)
                    progress.update(metrics)
                    if saved_at == self.global_steps:  # metrics.png and report.html follow each checkpoint
                        self.update_report()
            if stop.requested:
                self.stopped_by = stop.signal_name
                if save_freq == 0:
                    where = "no checkpoint (trainer.save_freq=0)"
                elif saved_at > 0:
                    where = f"checkpoint {self.step_dir(saved_at)}"
                else:
                    where = "no checkpoint (no step had finished)"
                console_write(  # above the progress bar, which is still shown
                    f"[verl] stopped by {stop.signal_name} after step {self.global_steps}; {where}; "
                    "run the same command again to resume",
                    sys.stderr,
                )
        except BaseException as err:
            failure = f"{type(err).__name__}: {err}"  # the report says the run failed, and why
            raise
        finally:
            progress.close()
            self._tracker.finish()
            self._in_fit = False
            if self._reporter is not None:
                self._reporter.finish(self.global_steps, stopped_by=self.stopped_by, error=failure)
        return val_metrics

    def _timed_validate(self) -> dict[str, float]:
        timing: dict[str, float] = {}
        with marked_timer("testing", timing):
            metrics = self._validate()
        if metrics:
            metrics["timing_s/testing"] = timing["testing"]
            self.val_history.append((self.global_steps, dict(metrics)))
        return metrics
