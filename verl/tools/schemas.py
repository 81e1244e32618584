"""OpenAI function-tool schemas (the ``tool_schema`` of a tool config) and the result a tool returns.

These are the shapes verl's tool configs and chat templates use::

    {"type": "function", "function": {"name": "calculator", "description": "...",
     "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}

Parameter property schemas keep any extra JSON-schema keys (``items``, ``minimum``, ...) so a schema round-trips
unchanged into the chat template.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "OpenAIFunctionParametersSchema",
    "OpenAIFunctionParsedSchema",
    "OpenAIFunctionPropertySchema",
    "OpenAIFunctionSchema",
    "OpenAIFunctionToolCall",
    "OpenAIFunctionToolSchema",
    "ToolResponse",
]


class OpenAIFunctionPropertySchema(BaseModel):
    """One parameter of a function (a JSON-schema property); extra JSON-schema keys are kept. ``type`` may be
    absent: schemas discovered from MCP servers use ``anyOf``/``$ref`` properties without one."""

    model_config = ConfigDict(extra="allow")

    type: str | list[str] | None = None
    description: str | None = None
    enum: list[Any] | None = None


class OpenAIFunctionParametersSchema(BaseModel):
    """The parameters object of a function."""

    model_config = ConfigDict(extra="allow")

    type: str = "object"
    properties: dict[str, OpenAIFunctionPropertySchema] = Field(default_factory=dict)
    required: list[str] = Field(default_factory=list)


class OpenAIFunctionSchema(BaseModel):
    """A function: its name (what the model calls), description and parameters."""

    name: str
    description: str = ""
    parameters: OpenAIFunctionParametersSchema = Field(default_factory=OpenAIFunctionParametersSchema)
    strict: bool = False


class OpenAIFunctionToolSchema(BaseModel):
    """A tool in OpenAI format: ``{"type": "function", "function": {...}}``."""

    type: str = "function"
    function: OpenAIFunctionSchema


class OpenAIFunctionParsedSchema(BaseModel):
    """A parsed call: the function name and its arguments as a JSON string."""

    name: str
    arguments: str


class OpenAIFunctionToolCall(BaseModel):
    """A tool call in OpenAI format (as an assistant message's ``tool_calls`` entry)."""

    id: str
    type: Literal["function"] = "function"
    function: OpenAIFunctionParsedSchema


class ToolResponse(BaseModel):
    """What a tool gives back to the model: the text of the ``tool`` message."""

    text: str | None = None
