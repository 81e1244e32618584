"""``tool_agent``: a multi-turn episode with tool calls and (optionally) an interaction playing the user.

Per sample::

    prompt = chat_template(raw_prompt, tools)                 # with the assistant generation prompt
    loop:
        turn = generate(prompt + response, budget)            # response_mask 1
        calls = parse(turn)                                   # rollout.multi_turn.format
        if calls (or malformed calls):
            run up to max_parallel_calls tools concurrently    # results cut to max_tool_response_length chars
            response += chat_template(tool messages)           # response_mask 0
        elif an interaction is set:
            stop, reply, score = interaction.generate_response(messages)
            response += chat_template(user reply)              # response_mask 0
        else: stop

It stops at ``max_assistant_turns``, ``max_user_turns``, when the response reaches ``response_length`` tokens
(a tool or user reply that does not fit is cut, and the trajectory is marked truncated), at an assistant turn that
ends without EOS, or when the interaction ends the episode. Malformed or unknown calls and failing tools become
``Error: ...`` tool messages and counted metrics; nothing the model writes raises.

Tools and interactions are chosen per sample by ``extra_info``: ``tools_kwargs`` (``{tool name: {create_kwargs,
execute_kwargs, calc_reward_kwargs, release_kwargs}}``) and ``interaction_kwargs`` (``{"name": ..., ...}``).
The sample's reward from the loop is the sum of the tools' step rewards, each created instance's ``calc_reward``
and the interaction's turn scores.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.experimental.agent_loop.chat import encode_appended, encode_prompt, sanity_check, truncate_text
from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
from verl.tools.base_tool import instance_id_of, normalize_tool_result

__all__ = ["ToolAgentLoop"]

logger = logging.getLogger(__name__)


class _Episode:
    """The mutable state of one trajectory."""

    def __init__(self, prompt_ids: list[int], messages: list[dict[str, Any]]) -> None:
        self.prompt_ids = prompt_ids
        self.messages = messages
        self.response_ids: list[int] = []
        self.response_mask: list[int] = []
        self.log_probs: list[float] = []
        self.has_log_probs = True
        self.reward = 0.0
        self.assistant_turns = 0
        self.user_turns = 0
        self.tool_calls: Counter[str] = Counter()
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
        ids = encode_appended(self.tokenizer, messages)
        ep.messages.extend(messages)
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

    async def _call_tool(self, ep: _Episode, call: FunctionCall, tools_kwargs: dict[str, Any]) -> str:
        """Run one call; returns the text of its tool message (an ``Error: ...`` text when it failed)."""
        ep.tool_calls[call.name] += 1
        tool = self.tools.get(call.name)
        if tool is None:
            ep.tool_errors += 1
            return f"Error: unknown tool {call.name!r}; available tools: {sorted(self.tools)}"
        try:
            instance_id = await self._tool_instance(ep, call.name, tools_kwargs)
            execute_kwargs = (tools_kwargs.get(call.name) or {}).get("execute_kwargs") or {}
            result = await tool.execute(instance_id, call.parameters(), **execute_kwargs)
            response, reward, metrics = normalize_tool_result(call.name, result)
        except Exception as e:  # noqa: BLE001  (a failing tool is the model's problem to read, not a crash)
            ep.tool_errors += 1
            logger.debug("tool %s failed", call.name, exc_info=True)
            return f"Error: tool {call.name!r} failed: {type(e).__name__}: {e}"
        ep.reward += reward
        if metrics.get("ok") is False:
            ep.tool_errors += 1
        text = response.text or ""
        s = self.settings
        text, cut = truncate_text(text, s.max_tool_response_length, s.tool_response_truncate_side)
        ep.tool_responses_cut += int(cut)
        return text

    async def _run_tools(
        self, ep: _Episode, calls: list[FunctionCall], errors: list[str], tools_kwargs: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """Tool messages for this turn: the calls' results (up to ``max_parallel_calls`` run concurrently) and
        one error message per malformed call or per call over the limit."""
        limit = self.settings.max_parallel_calls
        run, skipped = calls[:limit], calls[limit:]
        start = time.perf_counter()
        texts = await asyncio.gather(*(self._call_tool(ep, call, tools_kwargs) for call in run))
        ep.tool_s += time.perf_counter() - start
        ep.parse_errors += len(errors)
        ep.tool_errors += len(skipped)
        texts = list(texts) + [f"Error: {e}" for e in errors]
        texts += [f"Error: call of {c.name!r} not run: at most {limit} tool calls per turn" for c in skipped]
        return [{"role": "tool", "content": t} for t in texts]

    # ------------------------------------------------------------------------------------------------------ run
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        raw_prompt = kwargs.get("raw_prompt")
        if raw_prompt is None:
            raise ValueError("tool_agent needs the chat messages of each prompt: set data.return_raw_chat=true")
        extra_info = kwargs.get("extra_info") or {}
        tools_kwargs = extra_info.get("tools_kwargs") or {}
        interaction_kwargs = extra_info.get("interaction_kwargs")
        schemas = [t.tool_schema.model_dump(exclude_none=True) for t in self.tools.values()]
        messages = [dict(m) for m in raw_prompt]
        prompt_ids = encode_prompt(self.tokenizer, messages, schemas)
        if len(prompt_ids) > self.settings.prompt_length:
            raise ValueError(
                f"sample {kwargs.get('index')}: the prompt with its tool schemas is {len(prompt_ids)} tokens, longer "
                f"than rollout.prompt_length={self.settings.prompt_length}; raise data.max_prompt_length"
            )
        ep = _Episode(prompt_ids, messages)
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
        try:
            await self._loop(ep, tools_kwargs, interaction, interaction_id)
        finally:
            for name, instance_id in ep.instances.items():
                kw = tools_kwargs.get(name) or {}
                reward = await self.tools[name].calc_reward(instance_id, **(kw.get("calc_reward_kwargs") or {}))
                ep.reward += float(reward)
                await self.tools[name].release(instance_id, **(kw.get("release_kwargs") or {}))
            if interaction is not None:
                await interaction.finalize_interaction(interaction_id)
        mismatch = None
        if not ep.truncated and ep.messages and ep.messages[-1]["role"] == "assistant":
            mismatch = sanity_check(
                self.tokenizer,
                ep.prompt_ids + ep.response_ids,
                ep.messages,
                schemas,
                self.settings.tokenization_sanity_check_mode,
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
                "tool_calls": dict(ep.tool_calls),
                "tool_errors": ep.tool_errors,
                "parse_errors": ep.parse_errors,
                "tool_responses_cut": ep.tool_responses_cut,
                "tool_s": ep.tool_s,
                "generate_s": ep.generate_s,
                "truncated": ep.truncated,
                "sanity_mismatch": mismatch is not None,
            },
        )

    async def _loop(self, ep: _Episode, tools_kwargs: dict[str, Any], interaction: Any, interaction_id: Any) -> None:
        s = self.settings
        while True:
            budget = self._budget(ep)
            if budget <= 0:
                ep.truncated = True
                return
            start = time.perf_counter()
            out = await self.server.generate(ep.prompt_ids + ep.response_ids, budget)
            ep.generate_s += time.perf_counter() - start
            ep.append(out.token_ids, 1, out.log_probs)
            ep.assistant_turns += 1
            text_ids = out.token_ids[:-1] if out.stop_reason == "eos" else out.token_ids
            turn = self.parser.extract_tool_calls(text_ids)
            ep.messages.append({"role": "assistant", "content": self.parser.decode(text_ids)})
            if out.stop_reason != "eos":
                ep.truncated = True
                return
            if s.max_assistant_turns is not None and ep.assistant_turns >= s.max_assistant_turns:
                return
            if turn.calls or turn.errors:
                tool_messages = await self._run_tools(ep, turn.calls, turn.errors, tools_kwargs)
                if not self._append_reply(ep, tool_messages):
                    return
                continue
            if interaction is None or (s.max_user_turns is not None and ep.user_turns >= s.max_user_turns):
                return
            should_stop, reply, score, _ = await interaction.generate_response(interaction_id, ep.messages)
            ep.user_turns += 1
            ep.reward += float(score)
            if should_stop:
                return
            if not self._append_reply(ep, [{"role": "user", "content": reply}]):
                return
