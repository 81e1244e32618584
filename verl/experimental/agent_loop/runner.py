"""Run a prompt batch through agent loops over request servers and return it in the rollout layout.

``AgentLoopRunner.generate_sequences(prompts, open_servers)`` is what the driver's
:class:`~verl.experimental.agent_loop.manager.AgentLoopManager` calls when ``rollout.multi_turn.enable`` is true.
Every row becomes one coroutine of the loop named by its ``agent_name`` column (else
``rollout.agent.default_agent_loop``); the rows are split over ``rollout.agent.num_workers`` worker threads, each
with its own event loop (a tool that blocks its loop stalls only its share); each row sends its generation requests
to the request server its sample group was placed on (one per engine rank, :func:`place_groups`): an engine's own
(vLLM serves each request as it arrives, :class:`~verl.workers.rollout.vllm_request_server.VLLMRequestServer`) or a
:class:`~verl.workers.rollout.request_server.BatchingRequestServer` over a ``generate_sequences``.

Output, like a single-turn engine's (``verl.workers.rollout.base``): ``prompts [bs, prompt_len]`` (left-padded),
``responses``/``response_mask [bs, response_length]`` (right-padded; mask 0 on tool and user tokens),
``input_ids``/``attention_mask``/``position_ids [bs, prompt_len + response_length]``, ``rollout_log_probs``
when the engine computes them, and the non-tensor columns ``agent_reward`` (float: tool rewards and interaction
scores, added to the final reward by the trainer) and ``agent_metrics`` (dict per sample, see
:mod:`verl.experimental.agent_loop.metrics`), one column per key of the outputs' ``extra_fields`` and of
``STABLE_EXTRA_FIELDS`` (None where a row's loop set none) and ``tool_extra_fields`` (each row's whole
``extra_fields`` dict, which reward managers merge into ``extra_info``); with a judge
(``reward_model.judge.overlap_rollout``) also the judge columns of :mod:`verl.experimental.agent_loop.judge_overlap`,
each row judged as soon as its loop ended.

A loop may return a list of outputs for one row (``openai_agent`` with ``agent.openai.train_segments=all``: one per
segment of a trajectory whose agent rewrote its history); each becomes its own output row, in order, the last the
trajectory's final output, so the output may hold more rows than the prompts. The columns ``session_id`` (the
prompt row), ``segment_index`` and ``segment_count`` name them (:mod:`verl.trainer.ppo.sessions`); the judge
scores the final output and its columns are copied to the trajectory's other rows.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch

from verl.experimental.agent_loop.agent_loop import (
    STABLE_EXTRA_FIELDS,
    AgentLoopOutput,
    AgentLoopSettings,
    get_agent_loop_class,
    load_agent_loop_config,
)
from verl.experimental.agent_loop.tool_parser import ToolParser
from verl.protocol import DataProto
from verl.tools.base_tool import BaseTool
from verl.utils.torch_functional import compute_position_id_with_mask
from verl.workers.rollout.request_server import BatchingRequestServer, RequestServer

__all__ = [
    "AGENT_INPUT_KEYS",
    "AgentLoopRunner",
    "OpenServers",
    "RolloutJudging",
    "TrajectoryJudge",
    "build_agent_output",
    "extra_field_columns",
    "place_groups",
    "session_columns",
]

OpenServers = Callable[[dict[str, Any]], list[RequestServer]]
"""``meta_info -> request servers`` for one batch (one per engine rank), each closed by the runner afterwards."""


class RolloutJudging(Protocol):
    """One rollout batch's judging (``judge_overlap.JudgeBatch``): a row is submitted when its loop ends."""

    def submit(self, index: int, prompt_ids: list[int], response_ids: list[int]) -> None: ...

    def collect(self) -> dict[str, np.ndarray]: ...

    def close(self) -> None: ...


class TrajectoryJudge(Protocol):
    """What judges trajectories during the rollout (``judge_overlap.JudgeOverlap``)."""

    def open_batch(self, tokenizer: Any, ground_truths: list[Any]) -> RolloutJudging: ...


AGENT_INPUT_KEYS = ("raw_prompt", "extra_info", "agent_name", "index")
"""Prompt columns an agent loop reads, carried to the engine with the prompt tensors."""


class AgentLoopRunner:
    """Agent loops over request servers.

    Args:
        rollout_config: the ``actor_rollout_ref.rollout`` section as a ``RolloutConfig`` (``multi_turn.*``,
            ``agent.*``, lengths).
        tokenizer: the model's tokenizer.
        generate_batch: a plain ``generate_sequences`` (prompts DataProto -> rollout DataProto) whose batches serve
            the turns when :meth:`generate_sequences` is given no ``open_servers``
            (:class:`~verl.workers.rollout.request_server.BatchingRequestServer`).
        tools: ``BaseTool`` objects (e.g. from the Python API) added to those of ``multi_turn.tool_config_path``.
        judge: a :class:`~verl.experimental.agent_loop.judge_overlap.JudgeOverlap`: each row's judge request is
            sent as soon as its loop ends (ground truths from the batch's ``reward_model`` column).
        chat_template_kwargs: ``data.apply_chat_template_kwargs`` (e.g. ``{"enable_thinking": False}``): given to
            every chat-template rendering of the loops.
    """

    def __init__(
        self,
        rollout_config: Any,
        tokenizer: Any,
        generate_batch: Callable[[DataProto], DataProto] | None = None,
        tools: list[Any] | None = None,
        judge: TrajectoryJudge | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        from verl.interactions.utils.interaction_registry import initialize_interactions_from_config
        from verl.tools.utils.tool_registry import load_all_tools

        if tokenizer is None:
            raise ValueError("multi-turn rollouts need the model's tokenizer (the engine was built without one)")
        self.settings = AgentLoopSettings.from_rollout_config(rollout_config, chat_template_kwargs=chat_template_kwargs)
        self.tokenizer = tokenizer
        self.generate_batch = generate_batch
        self.judge = judge
        mt, agent = rollout_config.multi_turn, rollout_config.agent
        self.tools = {t.name: t for t in load_all_tools(mt.tool_config_path, mt.function_tool_path)}
        for tool in tools or []:
            if not isinstance(tool, BaseTool):
                raise TypeError(f"agent tools must be verl.tools.base_tool.BaseTool objects, got {type(tool).__name__}")
            if tool.name in self.tools:
                raise ValueError(
                    f"two agent tools are named {tool.name!r} (given, and in multi_turn.tool_config_path / "
                    "function_tool_path)"
                )
            self.tools[tool.name] = tool
        interaction_path = mt.interaction_config_path
        self.interactions = initialize_interactions_from_config(interaction_path) if interaction_path else {}
        loop_path = agent.agent_loop_config_path
        if loop_path:
            load_agent_loop_config(loop_path)
        get_agent_loop_class(self.settings.default_agent_loop)
        ToolParser.get_tool_parser(self.settings.format, tokenizer)
        self.last_batch_sizes: list[int] = []

    def generate_sequences(self, prompts: DataProto, open_servers: OpenServers | None = None) -> DataProto:
        """Run every row's agent loop; returns the layout of the module docstring.

        ``open_servers(meta_info)`` gives this batch's request servers (one per engine rank; a sample group's rows
        all go to one of them, :func:`place_groups`); without it the turns are batched onto ``generate_batch``."""
        if any(bool(r) for r in prompts.non_tensor_batch.get("multi_modal_inputs", ())):
            raise ValueError("rollout.multi_turn (agent loops) does not support prompts with images or videos yet")
        input_ids, attention_mask = prompts.batch["input_ids"].cpu(), prompts.batch["attention_mask"].cpu()
        n = input_ids.shape[0]
        columns = {k: prompts.non_tensor_batch[k] for k in AGENT_INPUT_KEYS if k in prompts.non_tensor_batch}
        rows = []
        for i in range(n):
            row = {k: v[i] for k, v in columns.items()}
            row["prompt_ids"] = [int(t) for t in input_ids[i][attention_mask[i].bool()].tolist()]
            rows.append(row)
        meta = dict(prompts.meta_info)
        settings = self.settings
        if meta.get("response_length") is not None:  # a call's own length (as for single-turn engines)
            settings = dataclasses.replace(settings, response_length=int(meta["response_length"]))
        meta.setdefault("eos_token_id", self.tokenizer.eos_token_id)
        meta.setdefault("pad_token_id", self.tokenizer.pad_token_id)
        servers = self._open_servers(open_servers, meta)
        try:
            placed = [servers[k] for k in place_groups(input_ids, attention_mask, len(servers))]
        except BaseException:
            _close_all(servers)
            raise
        results: list[list[AgentLoopOutput] | None] = [None] * n
        errors: list[BaseException] = []
        judging = None
        try:
            judging = self._open_judge_batch(prompts, n)
            for server in placed:
                server.open_trajectory()
            shares = [s for s in np.array_split(np.arange(n), min(self.settings.num_workers, n)) if len(s)]
            args = (rows, meta, settings, placed, results, errors, judging)
            threads = [threading.Thread(target=self._worker, args=(list(share), *args)) for share in shares]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            self.last_batch_sizes = [size for server in servers for size in server.batch_sizes]
            _close_all(servers)
            if errors and judging is not None:
                judging.close()
        if errors:
            raise errors[0]
        prompt_len = max(settings.prompt_length, input_ids.shape[1])
        pad = meta["pad_token_id"] if meta["pad_token_id"] is not None else 0
        flat = [o for outs in results for o in outs]
        session = np.array([i for i, outs in enumerate(results) for _ in outs], dtype=np.int64)
        try:
            output = build_agent_output(flat, prompt_len, settings.response_length, int(pad), meta)
            output.non_tensor_batch.update(session_columns(results))
            if judging is not None:  # the requests still outstanding after the last loop ended (one per row)
                judged = judging.collect()
                taken = sorted(set(judged) & {k for o in flat for k in o.extra_fields})
                if taken:
                    raise ValueError(f"agent loop extra_fields {taken} are the judge's batch columns; rename them")
                output.non_tensor_batch.update({k: v[session] for k, v in judged.items()})
        finally:
            if judging is not None:
                judging.close()
        return output

    def _open_servers(self, open_servers: OpenServers | None, meta: dict[str, Any]) -> list[RequestServer]:
        if open_servers is not None:
            servers = list(open_servers(meta))
            if not servers:
                raise ValueError("open_servers gave no request server for the batch")
            return servers
        if self.generate_batch is None:
            raise ValueError("AgentLoopRunner.generate_sequences needs open_servers (the runner has no generate_batch)")
        return [BatchingRequestServer(self.generate_batch, meta)]

    def _open_judge_batch(self, prompts: DataProto, n: int) -> RolloutJudging | None:
        """The batch's judge requests when a judge is set (ground truths from the ``reward_model`` column)."""
        if self.judge is None:
            return None
        from verl.workers.reward_manager.abstract import ground_truth_of

        column = prompts.non_tensor_batch.get("reward_model")
        truths = [None] * n if column is None else [ground_truth_of(column[i]) for i in range(n)]
        return self.judge.open_batch(self.tokenizer, truths)

    def _worker(
        self,
        share: list[int],
        rows: list[dict[str, Any]],
        meta: dict[str, Any],
        settings: AgentLoopSettings,
        placed: list[RequestServer],
        results: list[list[AgentLoopOutput] | None],
        errors: list[BaseException],
        judging: RolloutJudging | None = None,
    ) -> None:
        async def one(i: int) -> None:
            start = time.perf_counter()
            try:
                name = rows[i].get("agent_name") or settings.default_agent_loop
                loop_cls = get_agent_loop_class(str(name))
                loop = loop_cls(settings, placed[i], self.tokenizer, self.tools, self.interactions)
                kwargs = {k: v for k, v in rows[i].items() if k != "agent_name"}
                result = await loop.run(meta, **kwargs)
                outs = list(result) if isinstance(result, (list, tuple)) else [result]
                if not outs or not all(isinstance(o, AgentLoopOutput) for o in outs):
                    raise TypeError(
                        f"agent loop {name!r} returned {result!r} for row {i}: expected an AgentLoopOutput or a "
                        "non-empty list of them (the last one the trajectory's final output)"
                    )
                results[i] = outs
                out = outs[-1]
                out.metrics["latency_s"] = time.perf_counter() - start
                if judging is not None:  # judged now, while the other rows still generate (the final output)
                    judging.submit(i, out.prompt_ids, out.response_ids)
            finally:
                placed[i].close_trajectory()

        async def main() -> None:
            outcomes = await asyncio.gather(*(one(i) for i in share), return_exceptions=True)
            errors.extend(o for o in outcomes if isinstance(o, BaseException))

        try:
            asyncio.run(main())
        except BaseException as e:  # noqa: BLE001  (re-raised by the calling thread)
            errors.append(e)


def place_groups(input_ids: torch.Tensor, attention_mask: torch.Tensor, ranks: int) -> list[int]:
    """The rank (request server) of each row: a sample group's rows (a run of adjacent rows with the same prompt,
    as the interleaved ``rollout.n`` repeat lays them out) stay on one rank, whose cache (vLLM's prefix cache) then
    holds their shared prompt; runs go to ranks in order, a run to the rank whose share of ``rows / ranks`` rows
    holds its middle row.

    ``input_ids``/``attention_mask``: ``[rows, prompt_len]``. Returns ``[rows]`` ints in ``[0, ranks)``.
    """
    rows = int(input_ids.shape[0])
    if ranks <= 1 or rows == 0:
        return [0] * rows
    masked = input_ids * attention_mask
    starts = [0] + [i for i in range(1, rows) if not torch.equal(masked[i], masked[i - 1])]
    placement = [0] * rows
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else rows
        # the rank whose share (rows / ranks of them) holds the middle of the group
        placement[start:end] = [min(ranks - 1, (start + end) * ranks // (2 * rows))] * (end - start)
    return placement


def _close_all(servers: list[RequestServer]) -> None:
    """Close every server (each once, even when one fails; the first failure is raised)."""
    error: BaseException | None = None
    for server in servers:
        try:
            server.close()
        except BaseException as e:  # noqa: BLE001  (the others still close)
            error = error or e
    if error is not None:
        raise error


def session_columns(results: list[list[AgentLoopOutput]]) -> dict[str, np.ndarray]:
    """The columns naming each output row's trajectory (:mod:`verl.trainer.ppo.sessions`): ``session_id`` (the
    prompt row it came from), ``segment_index`` (its place among that row's outputs) and ``segment_count``."""
    from verl.protocol.segment_columns import SEGMENT_COUNT, SEGMENT_INDEX, SESSION_ID

    return {
        SESSION_ID: np.array([i for i, outs in enumerate(results) for _ in outs], dtype=object),
        SEGMENT_INDEX: np.array([k for outs in results for k in range(len(outs))], dtype=object),
        SEGMENT_COUNT: np.array([len(outs) for outs in results for _ in outs], dtype=object),
    }


def build_agent_output(
    outputs: list[AgentLoopOutput], prompt_len: int, response_length: int, pad_token_id: int, meta: dict[str, Any]
) -> DataProto:
    """Pad trajectories into the rollout layout (see the module docstring)."""
    n = len(outputs)
    prompts = torch.full((n, prompt_len), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((n, prompt_len), dtype=torch.long)
    responses = torch.full((n, response_length), pad_token_id, dtype=torch.long)
    response_mask = torch.zeros((n, response_length), dtype=torch.long)
    response_attn = torch.zeros((n, response_length), dtype=torch.long)
    with_log_probs = all(o.response_logprobs is not None for o in outputs)
    log_probs = torch.zeros((n, response_length), dtype=torch.float32)
    for i, o in enumerate(outputs):
        if len(o.prompt_ids) > prompt_len or len(o.response_ids) > response_length:
            raise ValueError(
                f"agent loop output {i}: prompt {len(o.prompt_ids)} / response {len(o.response_ids)} tokens exceed "
                f"prompt_length={prompt_len} / response_length={response_length}"
            )
        if len(o.response_mask) != len(o.response_ids):
            raise ValueError(f"agent loop output {i}: response_mask and response_ids differ in length")
        if o.prompt_ids:
            prompts[i, prompt_len - len(o.prompt_ids) :] = torch.tensor(o.prompt_ids)
            prompt_mask[i, prompt_len - len(o.prompt_ids) :] = 1
        k = len(o.response_ids)
        if k:
            responses[i, :k] = torch.tensor(o.response_ids)
            response_mask[i, :k] = torch.tensor(o.response_mask)
            response_attn[i, :k] = 1
            if with_log_probs:
                log_probs[i, :k] = torch.tensor(o.response_logprobs, dtype=torch.float32)
    attention_mask = torch.cat([prompt_mask, response_attn], dim=-1)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "response_mask": response_mask,
        "input_ids": torch.cat([prompts, responses], dim=-1),
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
    }
    if with_log_probs:
        tensors["rollout_log_probs"] = log_probs * response_mask
    non_tensors = {
        "agent_reward": np.array([float(o.reward_score) for o in outputs], dtype=object),
        "agent_metrics": np.array([{**o.metrics, "num_turns": o.num_turns} for o in outputs], dtype=object),
        **extra_field_columns(outputs),
    }
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta)


_RESERVED_COLUMNS = (*AGENT_INPUT_KEYS, "agent_reward", "agent_metrics", "tool_extra_fields")
"""Batch columns an ``extra_fields`` key may not take: the runner's own, and the prompt columns the loops read
(which the trainer restores from the prompts after the rollout)."""


def extra_field_columns(outputs: list[AgentLoopOutput]) -> dict[str, np.ndarray]:
    """The non-tensor columns of the outputs' ``extra_fields`` (``[n]`` object arrays): one per key any output set
    and per :data:`STABLE_EXTRA_FIELDS` key, None in the rows that did not set it (so every batch of a run has the
    same columns whatever loops produced it), and ``tool_extra_fields``, each row's whole dict. A key that is one of
    the batch's own columns raises ValueError naming it."""
    from verl.protocol.segment_columns import SEGMENT_COUNT, SEGMENT_INDEX, SESSION_ID

    reserved = {*_RESERVED_COLUMNS, SESSION_ID, SEGMENT_INDEX, SEGMENT_COUNT}
    keys = list(STABLE_EXTRA_FIELDS)
    for i, o in enumerate(outputs):
        for key in o.extra_fields:
            if not isinstance(key, str) or key in reserved:
                raise ValueError(
                    f"agent loop output {i}: extra_fields key {key!r} is reserved (the batch's own columns: "
                    f"{sorted(reserved)}) or not a string; rename it"
                )
            if key not in keys:
                keys.append(key)
    columns = {key: np.empty(len(outputs), dtype=object) for key in [*keys, "tool_extra_fields"]}
    for j, o in enumerate(outputs):  # element by element: a list value stays one object of its row
        for key in keys:
            columns[key][j] = o.extra_fields.get(key)
        columns["tool_extra_fields"][j] = dict(o.extra_fields)
    return columns
