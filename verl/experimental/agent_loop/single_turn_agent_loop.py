"""``single_turn_agent``: the prompt as the dataset tokenized it, one generation, no tools."""

from __future__ import annotations

import time
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

__all__ = ["SingleTurnAgentLoop"]


@register("single_turn_agent")
class SingleTurnAgentLoop(AgentLoopBase):
    """One request of ``response_length`` tokens after the row's prompt ids."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        prompt_ids = list(kwargs["prompt_ids"])
        start = time.perf_counter()
        out = await self.server.generate(prompt_ids, self.settings.response_length)
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=out.token_ids,
            response_mask=[1] * len(out.token_ids),
            response_logprobs=out.log_probs,
            num_turns=2,
            metrics={"generate_s": time.perf_counter() - start, "truncated": out.stop_reason == "length"},
            extra_fields={"turn_scores": [], "tool_rewards": []},
        )
