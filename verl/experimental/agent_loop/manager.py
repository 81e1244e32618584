"""The driver's agent loops: a layer over the rollout engines' request servers (upstream verl's name).

The rollout engines know nothing of agents. With ``actor_rollout_ref.rollout.multi_turn.enable`` the driver (the
trainer, the Python API, ``main_eval``, the asynchronous rollouter) calls :meth:`AgentLoopManager.generate_sequences`
instead of the worker group's ``generate_sequences``. The manager holds what agents need (the tools of
``multi_turn.tool_config_path`` / ``function_tool_path`` and the Python API's own, the interactions, the judge that
scores each trajectory as its loop ends: ``reward_model.judge.overlap_rollout``) in an
:class:`~verl.experimental.agent_loop.runner.AgentLoopRunner`, and for each batch opens request servers
(:mod:`verl.workers.rollout.request_server`) on the engines:

- a local worker group (the ranks live in this process): each rank's own server
  (``ActorRolloutRefWorker.open_request_server``: vLLM's continuous one, or the ``hf`` decode loop batching what is
  waiting); a sample group's trajectories all go to one rank
  (:func:`~verl.experimental.agent_loop.runner.place_groups`);
- a remote (Ray) worker group: one :class:`~verl.workers.rollout.request_server.BatchingRequestServer` on the driver
  that gathers the waiting turn requests of every trajectory into one data-parallel ``generate_sequences`` call of
  the group (the rows split over the ranks as any generation call's are), the ranks holding their engines ready for
  the whole batch (``ActorRolloutRefWorker.hold_generation``: the ``hf`` parameters gathered once, vLLM awake);
- one worker object, or one rollout engine, in this process: its own server.

Output: the rollout layout of :mod:`verl.experimental.agent_loop.runner`.
"""

from __future__ import annotations

from typing import Any

from verl.base_config import omega_conf_to_dataclass
from verl.experimental.agent_loop.runner import AgentLoopRunner
from verl.protocol import DataProto, pad_dataproto_to_divisor, unpad_dataproto
from verl.workers.config import RolloutConfig
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.request_server import BatchingRequestServer, RequestServer

__all__ = ["AgentLoopManager"]


class AgentLoopManager:
    """Agent loops of the driver over a worker group's (or one engine's) request servers.

    Args:
        rollout_config: the ``actor_rollout_ref.rollout`` section (a ``RolloutConfig`` or its mapping).
        tokenizer: the model's tokenizer (chat template, tool parsing, decoding).
        worker_group: where the turns are generated: a local or Ray worker group of the actor role, one
            ``ActorRolloutRefWorker`` in this process, or a :class:`~verl.workers.rollout.base.BaseRollout`.
        tools: ``BaseTool`` objects (the Python API's ``tools=``) next to those of the config.
        judge_config: the ``reward_model.judge`` mapping when ``overlap_rollout`` is on
            (:func:`~verl.experimental.agent_loop.judge_overlap.judge_overlap_config`), else None.
        chat_template_kwargs: ``data.apply_chat_template_kwargs``, for every chat-template rendering of the loops.
    """

    def __init__(
        self,
        rollout_config: Any,
        tokenizer: Any,
        worker_group: Any,
        tools: list[Any] | None = None,
        judge_config: Any = None,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        section = rollout_config
        if not isinstance(section, RolloutConfig):
            section = omega_conf_to_dataclass(rollout_config, RolloutConfig)
        judge = None
        if judge_config is not None:
            from verl.experimental.agent_loop.judge_overlap import JudgeOverlap

            judge = JudgeOverlap.from_config(judge_config)
        self.worker_group = worker_group
        self.runner = AgentLoopRunner(
            section, tokenizer, tools=tools, judge=judge, chat_template_kwargs=chat_template_kwargs
        )

    @classmethod
    def from_config(
        cls, config: Any, tokenizer: Any, worker_group: Any, tools: list[Any] | None = None
    ) -> AgentLoopManager:
        """From a run's whole config (``actor_rollout_ref.rollout``, ``reward_model.judge`` for the judge and
        ``data.apply_chat_template_kwargs`` for the chat template)."""
        from verl.data.config import DataConfig
        from verl.experimental.agent_loop.judge_overlap import judge_overlap_config

        data = config.get("data") if hasattr(config, "get") else None
        template_kwargs = omega_conf_to_dataclass(data, DataConfig).apply_chat_template_kwargs if data else None
        return cls(
            config.actor_rollout_ref.rollout,
            tokenizer,
            worker_group,
            tools=tools,
            judge_config=judge_overlap_config(config),
            chat_template_kwargs=template_kwargs,
        )

    @property
    def judges_rollout(self) -> bool:
        """Whether trajectories are judged as their loops end (the batch then needs its ``reward_model`` column)."""
        return self.runner.judge is not None

    @property
    def last_batch_sizes(self) -> list[int]:
        """Requests per engine call (or engine step) of the last batch, over all its servers."""
        return self.runner.last_batch_sizes

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Every row of ``prompts`` (``input_ids``/``attention_mask [bs, prompt_len]`` and the agent columns
        ``raw_prompt``, ``extra_info``, ``agent_name``, ``index``) through its agent loop; returns the rollout
        layout (``responses``/``response_mask [bs, response_length]``, ``agent_reward``, ``agent_metrics``, ...)."""
        return self.runner.generate_sequences(prompts, self.open_servers)

    def open_servers(self, meta_info: dict[str, Any]) -> list[RequestServer]:
        """This batch's request servers, one per engine rank in this process, else one on the driver (see the
        module docstring); the runner closes them when the batch is done."""
        from verl.single_controller.base.worker_group import WorkerGroup
        from verl.single_controller.local.worker_group import LocalWorkerGroup

        group = self.worker_group
        if isinstance(group, LocalWorkerGroup):
            return list(group.open_request_server(meta_info))
        if isinstance(group, WorkerGroup):  # the ranks live in other processes
            return [self._batching_over_group(group, meta_info)]
        if isinstance(group, BaseRollout):
            return [group.request_server(meta_info)]
        opener = getattr(group, "open_request_server", None)
        if not callable(opener):
            raise TypeError(
                f"AgentLoopManager: {type(group).__name__} is neither a worker group, an actor worker nor a rollout "
                "engine (it has no open_request_server / request_server)"
            )
        return [opener(meta_info)]

    def _batching_over_group(self, group: Any, meta_info: dict[str, Any]) -> RequestServer:
        """One server on the driver whose batches of waiting turns go to the group as ``generate_sequences`` calls;
        the ranks hold their engines ready (``hold_generation``: parameters gathered once, vLLM awake) until the
        server closes."""
        hold = getattr(group, "hold_generation", None)
        if callable(hold):
            hold(True)
        try:
            server = BatchingRequestServer(self._generate_on_group, meta_info)
        except BaseException:
            if callable(hold):
                hold(False)
            raise
        if callable(hold):
            server.on_close(lambda: hold(False))
        return server

    def _generate_on_group(self, batch: DataProto) -> DataProto:
        """One data-parallel ``generate_sequences`` call of the group, padded to a multiple of its world size."""
        group = self.worker_group
        padded, pad_size = pad_dataproto_to_divisor(batch, int(group.world_size))
        return unpad_dataproto(group.generate_sequences(padded), pad_size)
