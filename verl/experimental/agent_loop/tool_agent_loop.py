"""``tool_agent``: a multi-turn episode with tool calls and (optionally) an interaction playing the user.

Per sample, a state machine (:class:`AgentState`, each state a ``_handle_<state>_state`` method a subclass may
override, as upstream verl's ``ToolAgentLoop``)::

    prompt = chat_template(raw_prompt, tools)                 # with the assistant generation prompt
    GENERATING:
        turn = generate(prompt + response, budget)            # response_mask 1
        calls = parse(turn)                                   # rollout.multi_turn.format
        -> PROCESSING_TOOLS if calls (or malformed calls), INTERACTING if an interaction is set, else TERMINATED
    PROCESSING_TOOLS:
        run up to max_parallel_calls tools concurrently        # results cut to max_tool_response_length chars
        response += chat_template(tool messages)               # response_mask 0
        -> GENERATING
    INTERACTING:
        stop, reply, score = interaction.generate_response(messages)
        response += chat_template(user reply)                  # response_mask 0
        -> GENERATING (TERMINATED when the interaction stops)

The episode keeps the conversation twice: ``messages``, in OpenAI chat form as upstream's loop keeps it (an
assistant turn is its content without the call markup plus ``tool_calls``, see
:meth:`ToolAgentLoop._build_assistant_message`), which interactions read; and ``transcript``, each assistant turn as
the model wrote it, which the tokenization sanity check renders (the same tokens as generated, whatever the template
makes of ``tool_calls``). A call the model gave an id (``FunctionCall.tool_call_id``, e.g. Kimi K2's
``functions.f:0``) keeps it as its ``tool_calls`` entry's ``id`` and is answered by a tool message carrying that
``tool_call_id``, so the template renders the reply under the model's own id.

It stops at ``max_assistant_turns``, ``max_user_turns``, when the response reaches ``response_length`` tokens
(a tool or user reply that does not fit is cut, and the trajectory is marked truncated), at an assistant turn that
ends without EOS, or when the interaction ends the episode. Malformed or unknown calls and failing tools become
``Error: ...`` tool messages and counted metrics; nothing the model writes raises.

Tools and interactions are chosen per sample by ``extra_info``: ``tools_kwargs`` (``{tool name: {create_kwargs,
execute_kwargs, calc_reward_kwargs, release_kwargs}}``) and ``interaction_kwargs`` (``{"name": ..., ...}``).
The sample's reward from the loop is the sum of the tools' step rewards, each created instance's ``calc_reward``
and the interaction's turn scores. The output's ``extra_fields`` hold ``tool_rewards`` (each run call's step
reward, in call order) and ``turn_scores`` (each interaction turn's score), as upstream's loop records them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from enum import Enum
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.experimental.agent_loop.chat import encode_appended, encode_prompt, sanity_check, truncate_text
from verl.experimental.agent_loop.tool_parser import FunctionCall, ParsedTurn, ToolParser
from verl.tools.base_tool import instance_id_of, normalize_tool_result

__all__ = ["AgentState", "ToolAgentLoop"]

logger = logging.getLogger(__name__)


class AgentState(Enum):
    """The states of a :class:`ToolAgentLoop` episode (upstream verl's names; ``INTERACTING`` is the user turn)."""

    GENERATING = "generating"
    PROCESSING_TOOLS = "processing_tools"
    INTERACTING = "interacting"
    TERMINATED = "terminated"


class _Episode:
    """The mutable state of one trajectory."""

    def __init__(
        self,
        prompt_ids: list[int],
        messages: list[dict[str, Any]],
        tools_kwargs: dict[str, Any] | None = None,
        interaction: Any = None,
        interaction_id: Any = None,
    ) -> None:
        self.prompt_ids = prompt_ids
        self.messages = messages  # OpenAI chat form (what interactions read)
        self.transcript = [dict(m) for m in messages]  # assistant turns as generated (the sanity check's)
        self.tools_kwargs = dict(tools_kwargs or {})
        self.interaction = interaction
        self.interaction_id = interaction_id
        self.turn = ParsedTurn(content="")  # the last assistant turn, parsed
        self.tool_calls: list[FunctionCall] = []  # its well-formed calls
        self.tool_rewards: list[float] = []
        self.turn_scores: list[float] = []
        self.response_ids: list[int] = []
        self.response_mask: list[int] = []
        self.log_probs: list[float] = []
        self.has_log_probs = True
        self.reward = 0.0
        self.assistant_turns = 0
        self.user_turns = 0
        self.tool_call_counts: Counter[str] = Counter()
        self.tool_errors = 0
        self.parse_errors = 0
        self.tool_responses_cut = 0
        self.tool_s = 0.0
        self.generate_s = 0.0
        self.truncated = False
        self.instances: dict[str, str] = {}

    def append(self, ids: list[int], mask: int, log_probs: list[float] | None = None) -> None:
        self.response_ids += ids
        self.response_mask += [mask] * len(ids)
        if log_probs is None:
            self.has_log_probs = self.has_log_probs and mask == 0
            log_probs = [0.0] * len(ids)
        self.log_probs += log_probs


_mismatch_reported = False


def _report_mismatch(index: Any, mismatch: str, mode: str) -> None:
    """The first mismatch of the process is a warning, the others debug lines (all are counted in the metrics)."""
    global _mismatch_reported
    if _mismatch_reported:
        logger.debug("tokenization sanity check (sample %s): %s", index, mismatch)
        return
    _mismatch_reported = True
    logger.warning(
        "tokenization sanity check (sample %s, mode %s): %s; the model is trained on the turn-by-turn tokens. "
        "Further mismatches are counted in agent/sanity_mismatch_ratio (whitespace-only differences pass with "
        "rollout.multi_turn.tokenization_sanity_check_mode=ignore_strippable)",
        index,
        mode,
        mismatch,
    )


@register("tool_agent")
class ToolAgentLoop(AgentLoopBase):
    """The multi-turn tool-calling loop (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.parser = ToolParser.get_tool_parser(self.settings.format, self.tokenizer)

    # -------------------------------------------------------------------------------------------------- helpers
    def _budget(self, ep: _Episode) -> int:
        return self.settings.response_length - len(ep.response_ids)

    def _append_reply(self, ep: _Episode, messages: list[dict[str, Any]]) -> bool:
        """Append tool/user ``messages`` (mask 0); False when they did not fit (cut, episode truncated)."""
        ids = encode_appended(self.tokenizer, messages, self.settings.chat_template_kwargs)
        ep.messages.extend(messages)
        ep.transcript.extend(dict(m) for m in messages)
        budget = self._budget(ep)
        if len(ids) >= budget:
            ep.append(ids[:budget], 0)
            ep.truncated = True
            return False
        ep.append(ids, 0)
        return True

    async def _tool_instance(self, ep: _Episode, name: str, tools_kwargs: dict[str, Any]) -> str:
        if name not in ep.instances:
            create_kwargs = (tools_kwargs.get(name) or {}).get("create_kwargs") or {}
            ep.instances[name] = instance_id_of(name, await self.tools[name].create(**create_kwargs))
        return ep.instances[name]

    async def _call_tool(
        self, ep: _Episode, call: FunctionCall, tools_kwargs: dict[str, Any]
    ) -> tuple[str, float | None]:
        """Run one call; returns the text of its tool message (an ``Error: ...`` text when it failed) and the
        tool's step reward (None when the tool did not run)."""
        ep.tool_call_counts[call.name] += 1
        tool = self.tools.get(call.name)
        if tool is None:
            ep.tool_errors += 1
            return f"Error: unknown tool {call.name!r}; available tools: {sorted(self.tools)}", None
        try:
            instance_id = await self._tool_instance(ep, call.name, tools_kwargs)
            execute_kwargs = (tools_kwargs.get(call.name) or {}).get("execute_kwargs") or {}
            result = await tool.execute(instance_id, call.parameters(), **execute_kwargs)
            response, reward, metrics = normalize_tool_result(call.name, result)
        except Exception as e:  # noqa: BLE001  (a failing tool is the model's problem to read, not a crash)
            ep.tool_errors += 1
            logger.debug("tool %s failed", call.name, exc_info=True)
            return f"Error: tool {call.name!r} failed: {type(e).__name__}: {e}", None
        ep.reward += reward
        if metrics.get("ok") is False:
            ep.tool_errors += 1
        text = response.text or ""
        s = self.settings
        text, cut = truncate_text(text, s.max_tool_response_length, s.tool_response_truncate_side)
        ep.tool_responses_cut += int(cut)
        return text, reward

    async def _run_tools(
        self, ep: _Episode, calls: list[FunctionCall], errors: list[str], tools_kwargs: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """Tool messages for this turn: the calls' results (up to ``max_parallel_calls`` run concurrently) and
        one error message per malformed call or per call over the limit. A message answering a call the model gave
        an id carries it as ``tool_call_id``."""
        limit = self.settings.max_parallel_calls
        run, skipped = calls[:limit], calls[limit:]
        start = time.perf_counter()
        results = await asyncio.gather(*(self._call_tool(ep, call, tools_kwargs) for call in run))
        ep.tool_s += time.perf_counter() - start
        ep.parse_errors += len(errors)
        ep.tool_errors += len(skipped)
        ep.tool_rewards += [reward for _, reward in results if reward is not None]
        messages = [_tool_message(text, call) for call, (text, _) in zip(run, results, strict=True)]
        messages += [_tool_message(f"Error: {e}") for e in errors]
        messages += [
            _tool_message(f"Error: call of {c.name!r} not run: at most {limit} tool calls per turn", c) for c in skipped
        ]
        return messages

    # ------------------------------------------------------------------------------------------------------ run
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        raw_prompt = kwargs.get("raw_prompt")
        if raw_prompt is None:
            raise ValueError("tool_agent needs the chat messages of each prompt: set data.return_raw_chat=true")
        extra_info = kwargs.get("extra_info") or {}
        tools_kwargs = extra_info.get("tools_kwargs") or {}
        interaction_kwargs = extra_info.get("interaction_kwargs")
        schemas = self._schemas()
        messages = [dict(m) for m in raw_prompt]
        prompt_ids = encode_prompt(self.tokenizer, messages, schemas, self.settings.chat_template_kwargs)
        if len(prompt_ids) > self.settings.prompt_length:
            raise ValueError(
                f"sample {kwargs.get('index')}: the prompt with its tool schemas is {len(prompt_ids)} tokens, longer "
                f"than rollout.prompt_length={self.settings.prompt_length}; raise data.max_prompt_length"
            )
        interaction, interaction_id = None, None
        if interaction_kwargs:
            name = interaction_kwargs.get("name")
            if name not in self.interactions:
                raise ValueError(
                    f"sample {kwargs.get('index')}: interaction_kwargs.name={name!r} is not in "
                    f"multi_turn.interaction_config_path (interactions: {sorted(self.interactions)})"
                )
            interaction = self.interactions[name]
            interaction_id = await interaction.start_interaction(
                **{k: v for k, v in interaction_kwargs.items() if k != "name"}
            )
        ep = _Episode(prompt_ids, messages, tools_kwargs, interaction, interaction_id)
        try:
            await self._run_states(ep)
        finally:
            for name, instance_id in ep.instances.items():
                kw = tools_kwargs.get(name) or {}
                reward = await self.tools[name].calc_reward(instance_id, **(kw.get("calc_reward_kwargs") or {}))
                ep.reward += float(reward)
                await self.tools[name].release(instance_id, **(kw.get("release_kwargs") or {}))
            if interaction is not None:
                await interaction.finalize_interaction(interaction_id)
        mismatch = None
        if not ep.truncated and ep.transcript and ep.transcript[-1]["role"] == "assistant":
            mismatch = sanity_check(
                self.tokenizer,
                ep.prompt_ids + ep.response_ids,
                ep.transcript,
                schemas,
                self.settings.tokenization_sanity_check_mode,
                self.settings.chat_template_kwargs,
            )
            if mismatch:
                _report_mismatch(kwargs.get("index"), mismatch, self.settings.tokenization_sanity_check_mode)
        return AgentLoopOutput(
            prompt_ids=ep.prompt_ids,
            response_ids=ep.response_ids,
            response_mask=ep.response_mask,
            response_logprobs=ep.log_probs if ep.has_log_probs else None,
            reward_score=ep.reward,
            num_turns=1 + ep.assistant_turns + ep.user_turns + sum(1 for m in ep.messages if m["role"] == "tool"),
            metrics={
                "assistant_turns": ep.assistant_turns,
                "user_turns": ep.user_turns,
                "tool_calls": dict(ep.tool_call_counts),
                "tool_errors": ep.tool_errors,
                "parse_errors": ep.parse_errors,
                "tool_responses_cut": ep.tool_responses_cut,
                "tool_s": ep.tool_s,
                "generate_s": ep.generate_s,
                "truncated": ep.truncated,
                "sanity_mismatch": mismatch is not None,
            },
            extra_fields={"turn_scores": list(ep.turn_scores), "tool_rewards": list(ep.tool_rewards)},
        )

    async def _run_states(self, ep: _Episode) -> None:
        """Run the episode's states from ``GENERATING`` until ``TERMINATED``."""
        handlers = {
            AgentState.GENERATING: self._handle_generating_state,
            AgentState.PROCESSING_TOOLS: self._handle_processing_tools_state,
            AgentState.INTERACTING: self._handle_interacting_state,
        }
        state = AgentState.GENERATING
        while state is not AgentState.TERMINATED:
            if state not in handlers:
                raise ValueError(f"tool_agent: no handler for state {state!r}")
            state = await handlers[state](ep)

    async def _handle_generating_state(self, ep: _Episode) -> AgentState:
        """One assistant turn: generate, parse its tool calls; the next state (see the module docstring)."""
        s = self.settings
        budget = self._budget(ep)
        if budget <= 0:
            ep.truncated = True
            return AgentState.TERMINATED
        stops = [int(t) for t in self.parser.stop_token_ids]
        start = time.perf_counter()
        if stops:
            out = await self.server.generate(ep.prompt_ids + ep.response_ids, budget, stop_token_ids=stops)
        else:
            out = await self.server.generate(ep.prompt_ids + ep.response_ids, budget)
        ep.generate_s += time.perf_counter() - start
        ep.append(out.token_ids, 1, out.log_probs)
        ep.assistant_turns += 1
        # EOS is not part of the turn's text; a parser's stop token is (it may close a call)
        text_ids = out.token_ids[:-1] if out.stop_reason == "eos" else out.token_ids
        ep.turn = await self.parser.parse_turn(text_ids, self._schemas())
        ep.tool_calls = list(ep.turn.calls)
        ep.transcript.append({"role": "assistant", "content": self.parser.decode(text_ids)})
        ep.messages.append(self._build_assistant_message(ep.turn.content, ep))
        if out.stop_reason not in ("eos", "stop"):
            ep.truncated = True
            return AgentState.TERMINATED
        if s.max_assistant_turns is not None and ep.assistant_turns >= s.max_assistant_turns:
            return AgentState.TERMINATED
        if ep.turn.calls or ep.turn.errors:
            return AgentState.PROCESSING_TOOLS
        if ep.interaction is None or (s.max_user_turns is not None and ep.user_turns >= s.max_user_turns):
            return AgentState.TERMINATED
        return AgentState.INTERACTING

    async def _handle_processing_tools_state(self, ep: _Episode) -> AgentState:
        """Run the last turn's calls and append their tool messages (mask 0)."""
        tool_messages = await self._run_tools(ep, ep.turn.calls, ep.turn.errors, ep.tools_kwargs)
        if not self._append_reply(ep, tool_messages):
            return AgentState.TERMINATED
        return AgentState.GENERATING

    async def _handle_interacting_state(self, ep: _Episode) -> AgentState:
        """The interaction's reply to the conversation so far, appended as a user turn (mask 0)."""
        should_stop, reply, score, _ = await ep.interaction.generate_response(ep.interaction_id, ep.messages)
        ep.user_turns += 1
        ep.reward += float(score)
        ep.turn_scores.append(float(score))
        if should_stop:
            return AgentState.TERMINATED
        if not self._append_reply(ep, [{"role": "user", "content": reply}]):
            return AgentState.TERMINATED
        return AgentState.GENERATING

    @property
    def max_parallel_calls(self) -> int:
        """``multi_turn.max_parallel_calls``: the calls of one turn that run (the others are answered by an error)."""
        return self.settings.max_parallel_calls

    def _build_assistant_message(self, content: str, ep: Any) -> dict[str, Any]:
        """The assistant turn in OpenAI chat form: ``content`` (the turn without its call markup) and, when
        ``ep.tool_calls`` holds calls, ``tool_calls``: ``{"type": "function", "function": {"name", "arguments"}}``
        per call (arguments as a dict, as chat templates take them; kept as the string when not a JSON object),
        with ``"id"`` the model's own call id where it gave one. Every call is listed, also those beyond
        ``max_parallel_calls`` (each is answered by a tool message, an error for those not run)."""
        message: dict[str, Any] = {"role": "assistant", "content": content or ""}
        calls = list(ep.tool_calls or [])
        if not calls:
            return message
        entries = []
        for call in calls:
            try:
                arguments = json.loads(call.arguments)
            except (TypeError, json.JSONDecodeError):
                arguments = call.arguments
            if not isinstance(arguments, dict):
                arguments = call.arguments
            entry: dict[str, Any] = {"type": "function", "function": {"name": call.name, "arguments": arguments}}
            if call.tool_call_id is not None:
                entry["id"] = call.tool_call_id
            entries.append(entry)
        message["tool_calls"] = entries
        return message

    def _schemas(self) -> list[dict[str, Any]]:
        """The tools' OpenAI schemas (the chat template's ``tools``; the parser's, to name calls by id)."""
        return [t.tool_schema.model_dump(exclude_none=True) for t in self.tools.values()]


def _tool_message(text: str, call: FunctionCall | None = None) -> dict[str, Any]:
    """A ``tool`` message; it answers ``call`` by the id the model gave it (``tool_call_id``), when it gave one."""
    message: dict[str, Any] = {"role": "tool", "content": text}
    if call is not None and call.tool_call_id is not None:
        message["tool_call_id"] = call.tool_call_id
    return message
