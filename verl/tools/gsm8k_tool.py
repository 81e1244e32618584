"""verl's GSM8K answer tool (``verl.tools.gsm8k_tool.Gsm8kTool``): the model submits an answer and is told whether it
is right; the instance's reward is the score of its best submission.

Create kwargs (``extra_info.tools_kwargs.calc_gsm8k_reward.create_kwargs``): ``ground_truth``. A submission that
does not improve on the previous best costs a step penalty of -0.05, as in verl.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from verl.rewards import gsm8k
from verl.tools.base_tool import BaseTool, ToolResult
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

__all__ = ["Gsm8kTool"]


class Gsm8kTool(BaseTool):
    """``calc_gsm8k_reward(answer)``: score a GSM8K answer against the sample's ground truth."""

    def __init__(self, config: dict[str, Any] | None, tool_schema: OpenAIFunctionToolSchema | None) -> None:
        super().__init__(config, tool_schema)
        self._instances: dict[str, dict[str, Any]] = {}

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema.model_validate(
            {
                "type": "function",
                "function": {
                    "name": "calc_gsm8k_reward",
                    "description": "Score your answer to the GSM8K problem (1.0 if correct, 0.0 otherwise).",
                    "parameters": {
                        "type": "object",
                        "properties": {"answer": {"type": "string", "description": "the answer, digits only"}},
                        "required": ["answer"],
                    },
                },
            }
        )

    async def create(
        self, instance_id: str | None = None, ground_truth: Any = None, **kwargs: Any
    ) -> tuple[str, ToolResponse]:
        instance_id = instance_id or str(uuid4())
        self._instances[instance_id] = {"ground_truth": ground_truth, "reward": 0.0, "answer": ""}
        return instance_id, ToolResponse()

    def _state(self, instance_id: str) -> dict[str, Any]:
        if instance_id not in self._instances:
            raise KeyError(f"Gsm8kTool: no instance {instance_id!r} (create it first)")
        return self._instances[instance_id]

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> ToolResult:
        state = self._state(instance_id)
        answer = str(parameters.get("answer", ""))
        state["answer"] = answer if answer.startswith("#### ") else "#### " + answer
        previous = state["reward"]
        reward = self._score(state)
        state["reward"] = max(previous, reward)
        step_reward = 0.0 if reward > previous else -0.05
        return ToolResponse(text=f"Current parsed {answer=} {reward=}"), step_reward, {"reward": reward}

    @staticmethod
    def _score(state: dict[str, Any]) -> float:
        if state["ground_truth"] is None:
            return 0.0
        return float(gsm8k.compute_score(state["answer"], str(state["ground_truth"]), method="flexible"))

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The score of the instance's best submission."""
        return float(self._state(instance_id)["reward"])

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._instances.pop(instance_id, None)
