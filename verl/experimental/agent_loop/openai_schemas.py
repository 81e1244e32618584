"""Request bodies of the serving endpoints and the errors they answer with.

Types are strict (``"prompt": 5`` or ``"max_new_tokens": "8"`` is rejected, not coerced) so that a client bug is
reported, with the field named, instead of generating from a guessed value. Every error body has one shape, the
OpenAI one, so OpenAI clients show the message::

    {"error": {"message": "prompt: Field required", "type": "invalid_request_error", "param": "prompt",
               "code": "missing"}}
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, field_validator, model_validator

StrictFloat = Annotated[float, Strict()]  # JSON ints are still accepted for floats
StrictInt = Annotated[int, Strict()]
StrictStr = Annotated[str, Strict()]
StrictBool = Annotated[bool, Strict()]


class ServeError(Exception):
    """An error answered as ``status`` with the OpenAI error body; ``param`` names the offending field."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        err_type: str = "invalid_request_error",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.err_type = err_type
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The JSON error body."""
        return {"error": {"message": self.message, "type": self.err_type, "param": self.param, "code": self.code}}


def validation_error_to_serve_error(errors: list[dict[str, Any]]) -> ServeError:
    """A 422 :class:`ServeError` from pydantic/FastAPI validation errors, naming the first offending field.

    ``loc`` entries such as ``("body", "messages", 0, "content")`` become ``messages[0].content``.
    """
    parts: list[str] = []
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        at = first.get("loc", ("body", "?"))[-1]
        reason = (first.get("ctx") or {}).get("error", "invalid JSON")
        return ServeError(422, f"body: not valid JSON at character {at}: {reason}", "body", "json_invalid")
    if first.get("type") == "model_attributes_type" and tuple(first.get("loc", ())) == ("body",):
        message = "body: expected a JSON object (send it with Content-Type: application/json)"
        return ServeError(422, message, "body", "invalid_body")
    for err in errors:
        loc = [p for p in err.get("loc", ()) if p != "body"]
        # pydantic adds the union member it tried (e.g. "str", "list[str]") to the location: not a field name
        loc = [p for p in loc if not (isinstance(p, str) and ("[" in p or p in ("str", "int", "float", "bool")))]
        name = ""
        for p in loc:
            name += f"[{p}]" if isinstance(p, int) else (f".{p}" if name else str(p))
        parts.append(f"{name or 'body'}: {err.get('msg', 'invalid value')}")
    first_loc = [p for p in first.get("loc", ()) if p != "body"]
    param = str(first_loc[0]) if first_loc else None
    return ServeError(422, "; ".join(dict.fromkeys(parts)) or "invalid request body", param, first.get("type"))


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GenerateRequest(_Body):
    """``POST /generate``: the documents' request. Unset fields take the server's defaults."""

    prompt: StrictStr
    max_new_tokens: StrictInt | None = Field(default=None, ge=1)
    temperature: StrictFloat | None = Field(default=None, ge=0.0, le=10.0)
    top_p: StrictFloat | None = Field(default=None, gt=0.0, le=1.0)
    stop: StrictStr | list[StrictStr] | None = None
    stream: StrictBool = False


class _OpenAIBody(BaseModel):
    # OpenAI clients send fields this server does not implement; the harmless ones are accepted when they hold
    # their no-op value (see check_unsupported), anything else unknown is ignored like the OpenAI API does.
    model_config = ConfigDict(extra="ignore")

    model: StrictStr | None = None
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    temperature: StrictFloat | None = Field(default=None, ge=0.0, le=10.0)
    top_p: StrictFloat | None = Field(default=None, gt=0.0, le=1.0)
    n: StrictInt = Field(default=1, ge=1, le=16)
    stream: StrictBool = False
    stop: StrictStr | list[StrictStr] | None = None
    logprobs: Any = None
    echo: StrictBool = False
    presence_penalty: StrictFloat = 0.0
    frequency_penalty: StrictFloat = 0.0
    user: StrictStr | None = None

    def check_unsupported(self) -> None:
        """Raise a 400 naming the first field set to a value this server cannot honour."""
        for name, off in (("logprobs", (None, False, 0)), ("echo", (False,))):
            if getattr(self, name) not in off:
                raise ServeError(400, f"{name}: not supported by this server", name, "unsupported_parameter")
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name) != 0.0:
                raise ServeError(400, f"{name}: only 0 is supported by this server", name, "unsupported_parameter")
        if self.stream and self.n != 1:
            raise ServeError(400, "n: streaming supports n=1 only", "n", "unsupported_parameter")


class CompletionRequest(_OpenAIBody):
    """``POST /v1/completions`` (OpenAI): ``prompt`` is a string or a list of strings (one choice each)."""

    prompt: StrictStr | list[StrictStr]

    @field_validator("prompt")
    @classmethod
    def _non_empty_list(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and not value:
            raise ValueError("must be a string or a non-empty list of strings")
        return value


class ImageURL(BaseModel):
    """OpenAI's ``image_url`` object: the ``url`` (``detail`` is accepted and ignored; read by
    :func:`verl.serve.images.load_image_url`)."""

    model_config = ConfigDict(extra="ignore")
    url: StrictStr


class ImagePart(BaseModel):
    """One ``{"type": "image_url", "image_url": {"url": ...}}`` part of a chat message."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["image_url"]
    image_url: ImageURL


class TextPart(BaseModel):
    """One part of a multi-part chat message; only text parts are served."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: StrictStr


class ChatMessage(BaseModel):
    """One chat turn: ``role`` and ``content`` (a string or a list of text and ``image_url`` parts)."""

    model_config = ConfigDict(extra="ignore")
    role: StrictStr
    content: StrictStr | list[TextPart | ImagePart]

    def text(self) -> str:
        """The message's text as one string (image parts are left out: see :mod:`verl.serve.images`)."""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    # tool calling (openai_tool_calls.py): an assistant turn's calls, a tool reply's call id
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: StrictStr | None = None
    name: StrictStr | None = None

    @model_validator(mode="before")
    @classmethod
    def _null_content_with_tool_calls(cls, data: Any) -> Any:
        # OpenAI clients send "content": null on an assistant message that only calls tools
        if isinstance(data, dict) and data.get("content") is None and data.get("tool_calls"):
            return {**data, "content": ""}
        return data


class ChatCompletionRequest(_OpenAIBody):
    """``POST /v1/chat/completions`` (OpenAI): the messages are rendered with the model's chat template."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: StrictStr | dict[str, Any] | None = None


def stop_list(stop: str | list[str] | None) -> tuple[str, ...]:
    """``stop`` as a tuple of non-empty strings (OpenAI allows a string or a list)."""
    if stop is None:
        return ()
    items = [stop] if isinstance(stop, str) else list(stop)
    if len(items) > 8:
        raise ServeError(400, f"stop: at most 8 stop strings, got {len(items)}", "stop")
    if any(not s for s in items):
        raise ServeError(400, "stop: stop strings must be non-empty", "stop")
    return tuple(items)
