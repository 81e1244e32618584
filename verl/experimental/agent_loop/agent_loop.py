"""The agent-loop interface: one coroutine per sample that talks to the rollout engine (and tools, users) and
returns its trajectory as token ids with a response mask.

Loops register under a name (:func:`register`); a sample's ``agent_name`` column picks one, else
``rollout.agent.default_agent_loop``. Built in: ``single_turn_agent`` (one generation), ``tool_agent`` (tool
calls and interactions over several turns) and ``openai_agent`` (any agent through an OpenAI endpoint). Users
add loops with ``@register("my_agent")`` in a module they import, or list them in
``rollout.agent.agent_loop_config_path``::

    - name: my_agent
      _target_: my_package.my_module.MyAgentLoop
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf

from verl.experimental.agent_loop.settings import AgentLoopSettings
from verl.utils.import_utils import load_class
from verl.utils.registry import Registry, same_qualname
from verl.workers.rollout.request_server import RequestServer

__all__ = [
    "STABLE_EXTRA_FIELDS",
    "AgentLoopBase",
    "AgentLoopMetrics",
    "AgentLoopOutput",
    "AgentLoopSettings",
    "available_agent_loops",
    "get_agent_loop_class",
    "load_agent_loop_config",
    "register",
]


@dataclass
class AgentLoopMetrics:
    """Upstream verl's typed timing metrics of one trajectory (``verl/experimental/agent_loop/agent_loop.py``):
    seconds in generation, in tool calls and in scoring, and the engine's preemption count (-1: unknown). An
    :class:`AgentLoopOutput` given these stores them in its metrics dict under the keys the ``agent/*`` step
    metrics read: ``generate_s``, ``tool_s``, ``compute_score_s``, ``num_preempted``."""

    generate_sequences: float = 0.0
    tool_calls: float = 0.0
    compute_score: float = 0.0
    num_preempted: int = -1

    def as_metrics(self) -> dict[str, Any]:
        """The metrics dict of an :class:`AgentLoopOutput` (the keys of the class docstring)."""
        return {
            "generate_s": float(self.generate_sequences),
            "tool_s": float(self.tool_calls),
            "compute_score_s": float(self.compute_score),
            "num_preempted": int(self.num_preempted),
        }


STABLE_EXTRA_FIELDS = ("turn_scores", "tool_rewards", "min_global_steps", "max_global_steps", "extras")
"""The ``extra_fields`` columns every agent-loop batch has (None where a loop set none), as upstream's worker keeps
them, so batches from different loops concatenate: ``turn_scores`` (interaction scores per user turn) and
``tool_rewards`` (step reward per tool call) are the built-in loops' lists; ``min_global_steps`` /
``max_global_steps`` (the policy versions a trajectory was generated with) and ``extras`` are a loop's own."""

_PROMOTED_FIELDS = ("teacher_ids", "teacher_logprobs")


@dataclass
class AgentLoopOutput:
    """One trajectory. ``response_ids``/``response_mask``/``response_logprobs`` are aligned lists
    (mask 1: tokens the model generated, trained on; 0: tool and user tokens); ``reward_score`` is the reward
    earned inside the loop (tool rewards and interaction scores) that the trainer adds to the final reward.

    ``metrics``: a dict (or upstream's :class:`AgentLoopMetrics`, stored as its dict). ``extra_fields``: anything
    else the loop records for the sample; each key becomes a non-tensor column of the rollout batch (every row has
    every key of the batch's outputs and :data:`STABLE_EXTRA_FIELDS`, None where unset), and the whole dict is the
    row's ``tool_extra_fields``, which reward managers merge into the reward function's ``extra_info``."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None = None
    reward_score: float = 0.0
    num_turns: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    extra_fields: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.metrics, AgentLoopMetrics):
            self.metrics = self.metrics.as_metrics()
        if not isinstance(self.metrics, dict):
            raise TypeError(f"AgentLoopOutput.metrics must be a dict or AgentLoopMetrics, got {type(self.metrics)}")
        if not isinstance(self.extra_fields, dict):
            raise TypeError(f"AgentLoopOutput.extra_fields must be a dict, got {type(self.extra_fields)}")

    def as_dict(self) -> dict[str, Any]:
        """The output's fields as a dict (lists and dicts copied), ``extra_fields`` included; as upstream's
        ``as_dict``, the distillation fields ``teacher_ids`` / ``teacher_logprobs`` of ``extra_fields`` move to the
        top level. The output itself is not changed."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields = {k: (v.copy() if isinstance(v, (list, dict)) else v) for k, v in fields.items()}
        for key in _PROMOTED_FIELDS:
            if key in fields["extra_fields"]:
                fields[key] = fields["extra_fields"].pop(key)
        return fields


class AgentLoopBase:
    """Base class of agent loops: subclasses implement :meth:`run`.

    Args:
        settings: the loop settings.
        server: the engine's request server (``await server.generate(prompt_ids, max_tokens)``).
        tokenizer: the model's tokenizer (chat template, decode).
        tools: ``{name: BaseTool}`` from ``multi_turn.tool_config_path`` (shared by all trajectories).
        interactions: ``{name: BaseInteraction}`` from ``multi_turn.interaction_config_path``.
    """

    def __init__(
        self,
        settings: AgentLoopSettings,
        server: RequestServer,
        tokenizer: Any,
        tools: dict[str, Any] | None = None,
        interactions: dict[str, Any] | None = None,
    ) -> None:
        self.settings = settings
        self.server = server
        self.tokenizer = tokenizer
        self.tools = dict(tools or {})
        self.interactions = dict(interactions or {})

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput | list[AgentLoopOutput]:
        """Run one sample. ``kwargs``: ``prompt_ids`` (the row's prompt token ids) and the row's columns
        (``raw_prompt``, ``extra_info``, ``index``, ...). A list of outputs (upstream v0.9's multi-output loops)
        gives the trajectory several training rows, the last its final output (``verl.trainer.ppo.sessions``)."""
        raise NotImplementedError


def _check_agent_loop_class(agent_name: str, cls: Any) -> None:
    if not (isinstance(cls, type) and issubclass(cls, AgentLoopBase)):
        raise TypeError(f"@register({agent_name!r}) needs an AgentLoopBase subclass, got {cls!r}")


# The built-in loops register themselves when their module is imported; imported by name on first lookup, as a
# user's loop module is, so this module stays below the loops that subclass its base class.
_BUILTIN_MODULES = (
    "verl.experimental.agent_loop.single_turn_agent_loop",
    "verl.experimental.agent_loop.tool_agent_loop",
    "verl.experimental.agent_loop.openai_agent.loop",
)

AGENT_LOOPS: Registry[type[AgentLoopBase]] = Registry(
    "agent loop",
    builtin_modules=_BUILTIN_MODULES,
    check=_check_agent_loop_class,
    same=same_qualname,  # a reloaded module's class is the same loop
    duplicate_error=lambda name, existing, cls: ValueError(
        f"agent loop {name!r} is already registered to {existing.__qualname__}"
    ),
    unknown_error=lambda name, known: ValueError(
        f"unknown agent loop {name!r} (agent_name column or agent.default_agent_loop); registered: {known}"
    ),
)
"""The agent loops by name (the ``agent_name`` column, ``agent.default_agent_loop``)."""
_REGISTRY = AGENT_LOOPS.entries  # name -> class, as before


def register(agent_name: str):
    """Class decorator registering an :class:`AgentLoopBase` subclass under ``agent_name``."""
    return AGENT_LOOPS.decorator(agent_name)


def available_agent_loops() -> list[str]:
    """The registered loop names."""
    return AGENT_LOOPS.names()


def get_agent_loop_class(agent_name: str) -> type[AgentLoopBase]:
    """The loop registered under ``agent_name``; unknown names raise ``ValueError`` listing the known ones."""
    return AGENT_LOOPS.get(agent_name)


def load_agent_loop_config(path: str) -> list[str]:
    """Register the loops listed in ``path`` (``- name: ..., _target_: pkg.module.Class``); returns their names."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"agent loop config {path!r} (rollout.agent.agent_loop_config_path) not found")
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    if not isinstance(raw, list):
        raise ValueError(f"{path}: expected a list of entries with name and _target_")
    names = []
    for i, entry in enumerate(raw):
        where = f"{path}: [{i}]"
        if not isinstance(entry, dict) or not entry.get("name") or not entry.get("_target_"):
            raise ValueError(f"{where}: each entry needs name and _target_ (a dotted class path); got {entry!r}")
        cls = load_class(entry["_target_"], where)
        if not issubclass(cls, AgentLoopBase):
            raise ValueError(f"{where}: {entry['_target_']} is not a subclass of AgentLoopBase")
        register(str(entry["name"]))(cls)
        names.append(str(entry["name"]))
    return names


# upstream's agent-loop worker internals, which recipes subclass (verl-recipe spo's worker adds stop="</code>" to
# every request); loops here run in the driver's request server instead
_UPSTREAM_WORKER_INTERNALS = ("AgentLoopWorkerBase", "AgentLoopWorker", "get_trajectory_info")


def __getattr__(name: str) -> Any:
    if name == "AgentLoopManager":  # upstream's module holds it; here it is verl.experimental.agent_loop's
        from verl.experimental.agent_loop.manager import AgentLoopManager

        return AgentLoopManager
    if name in _UPSTREAM_WORKER_INTERNALS:
        raise ImportError(
            f"verl.experimental.agent_loop.agent_loop.{name}: upstream's agent-loop worker internals are not provided "
            "here (agent loops run in the driver's request server; docs/agent_loop.md); an AgentLoopBase subclass "
            "listed in rollout.agent.agent_loop_config_path runs as it is, a subclass of upstream's workers (and "
            "what it changes, such as stop strings) does not"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
