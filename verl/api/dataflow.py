"""The dataflow form of a PPO step: ``actor.sample() >> reward_model.score() >> ppo.update()``.

This is a small pipeline of the *same* worker calls that :meth:`RayPPOTrainer.train_step` makes, run by the same
single controller (the trainer's worker groups); it is not a separate execution engine. The stages:

* :class:`RolloutWorker` (``actor.sample()``): uid + repeat ``rollout.n`` + ``generate_sequences``;
* :class:`ScoreStage` (``reward_model.score()``): reward model worker / reward function -> ``token_level_scores``;
* :class:`verl.api.replay_buffer.ReplayBuffer`: keeps scored rollouts over several steps and serves mini-batches
  of them (a size limit and an off-policy age limit), one update per mini-batch;
* :class:`UpdateStage` (``ppo.update()``): ``compute_log_prob`` -> ``compute_ref_log_prob`` -> ``compute_values``
  -> KL-in-reward and advantages (``core_algos``) -> ``update_critic`` -> ``update_actor``.

``pipeline.run(prompts)`` (or ``pipeline(prompts)``) builds the prompt batch like :meth:`PPOTrainer.step` and
passes each stage's DataProto to the next; it returns the update's metrics (with the documents' names) and keeps
every stage's output in ``pipeline.outputs``. A stage may return :class:`MiniBatches` (the replay buffer does):
the stages after it then run once per mini-batch, and each update counts as one training step. Stages are
independent of each other, so a pipeline may also stop early (``actor.sample() >> reward.score()`` returns the
scored batch).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import torch

from verl.protocol import DataProto


class PPOTrainer(Protocol):
    """What the stages use of a trainer: :class:`verl.api.ppo.PPOTrainer` is the one that runs them. (A protocol,
    so that this module, which the models' ``sample()`` / ``score()`` build stages from, imports neither.)"""

    actor_model: torch.nn.Module
    reward_model: Any
    tokenizer: Any
    config: Any
    rollout_manager: Any  # verl.api.rollout.RolloutManager
    driver: Any  # verl.trainer.ppo.ray_trainer.RayPPOTrainer

    def make_batch(self, prompts: Any, attention_mask: torch.Tensor | None = None) -> DataProto: ...

    def _finish_step(self, metrics: dict[str, Any]) -> dict[str, float]: ...


class RewardModel(Protocol):
    """What the score stage uses of a :class:`verl.api.models.RewardModel`."""

    def as_reward_manager(self, tokenizer: Any) -> Any: ...


class Stage:
    """One step of a pipeline: ``run(trainer, data) -> DataProto | dict``. ``a >> b`` chains stages."""

    name = "stage"

    def run(self, trainer: PPOTrainer, data: DataProto) -> Any:
        raise NotImplementedError

    def bound_trainer(self) -> PPOTrainer | None:
        """The trainer this stage belongs to, when it knows one."""
        return None

    def __rshift__(self, other: Stage | Pipeline) -> Pipeline:
        return Pipeline([self]) >> other


class MiniBatches:
    """What a fan-out stage returns: an iterable of DataProtos, each run through the rest of the pipeline.

    Iterated lazily, so a stage can choose each mini-batch after the previous one's update (the replay buffer
    ages its rollouts by the updates made so far).
    """

    def __init__(self, batches: Iterable[DataProto]) -> None:
        self._batches = batches

    def __iter__(self) -> Iterator[DataProto]:
        return iter(self._batches)


class RolloutWorker(Stage):
    """The rollout stage: generate ``n`` (default ``rollout.n``) responses per prompt with ``actor`` through the
    trainer's actor worker group (uid + repeat + ``generate_sequences``); ``sampling`` overrides the rollout's
    ``temperature``, ``top_p``, ``top_k``, ``do_sample`` for this stage. ``actor.sample(**sampling)`` builds one.
    """

    name = "sample"

    def __init__(self, actor: torch.nn.Module, n: int | None = None, sampling: dict[str, Any] | None = None) -> None:
        if n is not None and int(n) < 1:
            raise ValueError(f"RolloutWorker: n={n!r} must be >= 1")
        self.actor = actor
        self.sampling = dict(sampling or {})
        if n is not None:
            self.sampling["n"] = int(n)

    def run(self, trainer: PPOTrainer, data: DataProto) -> DataProto:
        if trainer.actor_model is not self.actor:
            raise ValueError("actor.sample(): this actor is not the trainer's actor_model; build the trainer with it")
        sampling = dict(self.sampling)
        n = sampling.pop("n", None)
        return trainer.rollout_manager.generate(data, n=n, **sampling)


# the stage's earlier name
SampleStage = RolloutWorker


class ScoreStage(Stage):
    """Score the rollouts: with ``reward`` when given, else the trainer's own reward (function and/or model)."""

    name = "score"

    def __init__(self, reward: RewardModel | None = None) -> None:
        self.reward = reward

    def run(self, trainer: PPOTrainer, data: DataProto) -> DataProto:
        if self.reward is None or self.reward is trainer.reward_model:
            return trainer.rollout_manager.score(data)
        from verl.trainer.ppo.reward import compute_reward

        scores, _ = compute_reward(data, self.reward.as_reward_manager(trainer.tokenizer))
        data.batch["token_level_scores"] = scores
        return data


class UpdateStage(Stage):
    """One PPO update on a scored batch; returns the step's metrics."""

    name = "update"

    def __init__(self, trainer: PPOTrainer) -> None:
        self.trainer = trainer

    def bound_trainer(self) -> PPOTrainer:
        return self.trainer

    def run(self, trainer: PPOTrainer, data: DataProto) -> dict[str, float]:
        metrics = ppo_update(trainer, data)
        # what earlier stages measured about this batch (e.g. replay/size, replay/age/mean)
        metrics.update(data.meta_info.get("stage_metrics") or {})
        return metrics


def ppo_update(trainer: PPOTrainer, batch: DataProto) -> dict[str, float]:
    """The post-scoring half of a PPO step on ``batch`` (rollouts with ``token_level_scores``): exactly
    :meth:`RayPPOTrainer.update_stage` (old log-probs, reference log-probs, values, KL in reward, advantages,
    critic and actor updates). Returns the metrics (verl's names: ``actor/pg_loss``, ``critic/score/mean``,
    ``timing_s/*`` ...)."""
    from verl.trainer.ppo.metric_utils import marked_timer

    driver = trainer.driver
    if "token_level_scores" not in batch.batch.keys():
        raise ValueError("ppo.update() needs scored rollouts (token_level_scores): put a score stage before it")
    timing: dict[str, float] = {}
    metrics: dict[str, Any] = {}
    with marked_timer("step", timing):
        batch = driver.update_stage(batch, timing, metrics)
    metrics.update(driver.batch_metrics(batch, timing))
    return metrics


class Pipeline:
    """An ordered list of stages run through one trainer's worker groups."""

    def __init__(self, stages: list[Stage], trainer: PPOTrainer | None = None) -> None:
        self.stages = list(stages)
        self.trainer = trainer
        self.outputs: dict[str, Any] = {}

    def __rshift__(self, other: Stage | Pipeline) -> Pipeline:
        more = other.stages if isinstance(other, Pipeline) else [other]
        if not all(isinstance(s, Stage) for s in more):
            raise TypeError(f"a pipeline chains stages, got {type(other).__name__}")
        return Pipeline(self.stages + list(more), trainer=self.trainer or getattr(other, "trainer", None))

    def bind(self, trainer: PPOTrainer) -> Pipeline:
        """Run this pipeline through ``trainer`` (needed when no ``ppo.update()`` stage names it)."""
        self.trainer = trainer
        return self

    def _trainer(self) -> PPOTrainer:
        if self.trainer is not None:
            return self.trainer
        for stage in self.stages:
            bound = stage.bound_trainer()
            if bound is not None:
                return bound
        raise ValueError("this pipeline has no trainer: end it with ppo.update() or call .bind(trainer)")

    def run(self, prompts: Any, attention_mask: Any = None) -> Any:
        """Run every stage on the prompt batch; returns the last stage's result (metrics after an update).

        Each update stage counts as one training step (``global_steps`` + 1 just before it, evaluators and
        exporters after it, as :meth:`PPOTrainer.step`). After a stage that returns :class:`MiniBatches` the
        remaining stages run once per mini-batch and the result of the last one is returned.
        """
        trainer = self._trainer()
        data: Any = trainer.make_batch(prompts, attention_mask)
        self.outputs = {}
        return self._run_from(trainer, 0, data)

    def _run_from(self, trainer: PPOTrainer, start: int, data: Any) -> Any:
        for i in range(start, len(self.stages)):
            stage = self.stages[i]
            if not isinstance(data, DataProto):
                raise TypeError(f"stage {i} ({stage.name}) needs a DataProto, got {type(data).__name__}")
            is_update = isinstance(stage, UpdateStage)
            if is_update:
                with trainer.driver.next_step():
                    data = stage.run(trainer, data)
            else:
                data = stage.run(trainer, data)
            if is_update and isinstance(data, dict):
                data = trainer._finish_step(data)
            self.outputs[f"{i}:{stage.name}"] = data
            if isinstance(data, MiniBatches):
                result: Any = None
                for mini_batch in data:
                    result = self._run_from(trainer, i + 1, mini_batch)
                return result
        return data

    __call__ = run

    def __repr__(self) -> str:
        return " >> ".join(f"{s.name}()" for s in self.stages)
