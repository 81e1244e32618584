"""``BaseTrainer``: what every high-level trainer offers its user and the plug-ins it calls (evaluators, exporters).

A custom evaluator (``verl.utils.evaluation.Evaluator``) receives the trainer and may use:

* ``trainer.actor_model``: the policy being trained (``generate(input_ids, **kwargs)``, ``forward``);
* ``trainer.reward_model``: a callable ``reward_model(sequences) -> scores [batch]`` (token ids or texts), or None
  when the reward is a reward manager;
* ``trainer.tokenizer``: the policy's tokenizer;
* ``trainer.global_steps``, ``trainer.config`` and ``trainer.history`` (the metrics of every step so far).

:class:`verl.api.ppo.PPOTrainer` is the implementation; this class holds the plug-in bookkeeping they share.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from typing import Any


class BaseTrainer(ABC):
    """Base of the high-level trainers: the evaluator / metrics-exporter registry and the step contract.

    Subclasses set ``actor_model``, ``reward_model``, ``tokenizer`` and ``config`` and implement
    :meth:`step`, :meth:`train`, :meth:`save_checkpoint`, :meth:`load_checkpoint` and :attr:`global_steps`;
    each finished step goes through :meth:`_finish_step`, which runs the evaluators and exporters.
    """

    actor_model: Any
    reward_model: Any
    tokenizer: Any
    config: Any

    def __init__(self) -> None:
        self.evaluators: list[tuple[Any, int]] = []
        self.exporters: list[Any] = []
        self.history: list[dict[str, float]] = []

    # --------------------------------------------------------------------------------------------- contract
    @property
    @abstractmethod
    def global_steps(self) -> int:
        """Training steps taken so far."""

    @abstractmethod
    def step(self, prompts: Any, attention_mask: Any = None) -> dict[str, float]:
        """One training step on ``prompts``; returns its metrics."""

    @abstractmethod
    def train(self, num_steps: int | None = None, epochs: int | None = None) -> Iterator[dict[str, float]]:
        """Step over the trainer's data, yielding each step's metrics."""

    @abstractmethod
    def save_checkpoint(self, path: str | None = None) -> str:
        """Write a checkpoint; returns its directory."""

    @abstractmethod
    def load_checkpoint(self, path: str | None = None) -> int:
        """Continue from a checkpoint; returns the restored step count."""

    # ---------------------------------------------------------------------------------------------- plug-ins
    def register_evaluator(self, evaluator: Any, every_n_steps: int = 1) -> None:
        """Call ``evaluator.evaluate(trainer) -> dict`` every ``every_n_steps`` steps; its values join the metrics."""
        if not callable(getattr(evaluator, "evaluate", None)):
            raise TypeError(f"{type(evaluator).__name__} has no evaluate(trainer) method")
        if int(every_n_steps) < 1:
            raise ValueError(f"every_n_steps={every_n_steps!r} must be >= 1")
        self.evaluators.append((evaluator, int(every_n_steps)))

    def add_metrics_exporter(self, exporter: Any) -> None:
        """Call ``exporter.export(metrics: dict, step: int)`` after every step."""
        if not callable(getattr(exporter, "export", None)):
            raise TypeError(f"{type(exporter).__name__} has no export(metrics, step) method")
        self.exporters.append(exporter)

    def _run_plugins(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """Run the due evaluators (their values are merged in) and every exporter on a finished step's
        ``metrics``; record them in :attr:`history`. Returns the merged metrics."""
        step = self.global_steps
        out = dict(metrics)
        out["step"] = step
        for evaluator, every in self.evaluators:
            if step % every == 0:
                result = evaluator.evaluate(self)
                if not isinstance(result, Mapping):
                    raise TypeError(f"{type(evaluator).__name__}.evaluate returned {type(result).__name__}, not a dict")
                out.update(result)
        for exporter in self.exporters:
            exporter.export(out, step)
        self.history.append(out)
        return out

    def _close_exporters(self) -> None:
        for exporter in self.exporters:
            if callable(getattr(exporter, "close", None)):
                exporter.close()
