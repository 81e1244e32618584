"""Agents the openai_agent tests point ``agent.openai.agent`` at (``this_file.py:function``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai

SEEN: dict[Any, dict[str, str]] = {}  # index -> the base_url and key the agent got (concurrency test)


async def three_turns(task: dict[str, Any], base_url: str, api_key: str) -> float:
    """Three chat turns with the openai SDK, each answer sent back as returned, then a user message."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = list(task["messages"])
    for turn in range(3):
        r = await client.chat.completions.create(model="policy", messages=messages, max_tokens=8)
        messages.append(r.choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "user", "content": f"go on {turn}"})
    await client.close()
    return 1.0


def rewrites_history(task: dict[str, Any], base_url: str, api_key: str) -> dict[str, float]:
    """Synchronous client: two turns, then a request that drops the first exchange (a split)."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = list(task["messages"])
    first = client.chat.completions.create(model="m", messages=messages)
    messages += [first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "more"}]
    client.chat.completions.create(model="m", messages=messages)
    summary = [{"role": "user", "content": task["messages"][0]["content"] + " (summary)"}]
    client.chat.completions.create(model="m", messages=summary)
    return {"reward": 0.5}


async def rewrites_after_a_turn(task: dict[str, Any], base_url: str, api_key: str) -> float:
    """Like smolagents: an answer, then the history re-sent rewritten (the answer as user text: a split), a second
    answer. Its reward varies with the first answer (the trainer's GRPO groups then have advantages)."""
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        messages = list(task["messages"])
        first = await client.chat.completions.create(model="policy", messages=messages, max_tokens=4)
        text = first.choices[0].message.content or ""
        rewritten = [*messages, {"role": "user", "content": f"Observation: {text!r}"}]
        await client.chat.completions.create(model="policy", messages=rewritten, max_tokens=4)
    return len(text) / 10 + sum(map(ord, text)) % 7 / 100


async def splits_then_raises(task: dict[str, Any], base_url: str, api_key: str) -> float:
    """An answer, a request that starts over (a split), an answer, then a bug."""
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        messages = list(task["messages"])
        await client.chat.completions.create(model="policy", messages=messages)
        restart = [{"role": "user", "content": "again: " + messages[-1]["content"]}]
        await client.chat.completions.create(model="policy", messages=restart)
    raise RuntimeError("agent bug after a split")


async def misbehaves(task: dict[str, Any], base_url: str, api_key: str) -> Any:
    """What the row's ``extra_info.mode`` says: ok, raise, hang, malformed, over_budget, silent, not_a_number."""
    mode = task["extra_info"]["mode"]
    if mode == "silent":
        return 1.0
    if mode == "raise":
        raise RuntimeError("agent bug")
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        return await _misbehave(mode, client, task, base_url, api_key)


async def _misbehave(mode: str, client: Any, task: dict[str, Any], base_url: str, api_key: str) -> Any:
    messages = list(task["messages"])
    if mode == "hang":
        await client.chat.completions.create(model="m", messages=messages)
        await asyncio.sleep(60)
    if mode == "malformed":
        async with httpx.AsyncClient() as http:
            r = await http.post(
                f"{base_url}/chat/completions",
                headers={"Authorization": f"Bearer {api_key}"},
                json={"messages": [{"role": "user"}]},
            )
            assert r.status_code == 400, r.text
        return 1.0
    rounds = 3 if mode == "over_budget" else 1
    for _ in range(rounds):
        r = await client.chat.completions.create(model="m", messages=messages)
        messages += [r.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "again"}]
    return "done" if mode == "not_a_number" else 1.0


async def records_its_endpoint(task: dict[str, Any], base_url: str, api_key: str) -> float:
    """Notes its endpoint, waits for the other trajectory's, and tries the other's endpoint with its own key."""
    index = task["index"]
    SEEN[index] = {"base_url": base_url, "api_key": api_key}
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        r = await client.chat.completions.create(model="m", messages=list(task["messages"]))
    for _ in range(200):
        if len(SEEN) >= 2:
            break
        await asyncio.sleep(0.01)
    other = next(v for k, v in SEEN.items() if k != index)
    async with httpx.AsyncClient() as http:
        wrong = await http.get(f"{other['base_url']}/models", headers={"Authorization": f"Bearer {api_key}"})
    SEEN[index]["wrong_key_status"] = str(wrong.status_code)
    SEEN[index]["answer"] = r.choices[0].message.content
    for _ in range(200):  # both probed before either trajectory ends (and closes its endpoint)
        if all("answer" in v for v in SEEN.values()):
            break
        await asyncio.sleep(0.01)
    return 1.0


def api_tour(task: dict[str, Any], base_url: str, api_key: str) -> float:
    """Streaming chat with a tool call, the tool's reply, n=2, stop strings, /v1/models and /v1/completions."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    assert [m.id for m in client.models.list().data] == ["policy"]
    tools = [{"type": "function", "function": {"name": "calculator", "description": "math",
                                               "parameters": {"type": "object", "properties": {
                                                   "expression": {"type": "string"}}}}}]  # fmt: skip
    done = client.completions.create(model="policy", prompt="Q9 free text", max_tokens=4)
    assert done.choices[0].text == "xyz" and done.choices[0].finish_reason == "stop"
    messages = list(task["messages"])  # another API and conversation: a new segment
    stream = client.chat.completions.create(model="policy", messages=messages, tools=tools, stream=True)
    calls, content, finish = {}, "", None
    for chunk in stream:
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        for call in choice.delta.tool_calls or []:
            calls[call.index] = call
        finish = choice.finish_reason or finish
    assert finish == "tool_calls", finish
    call = calls[0]
    assert call.function.name == "calculator" and json.loads(call.function.arguments) == {"expression": "12*34"}
    messages.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": call.id, "type": "function", "function": {"name": "calculator", "arguments": call.function.arguments}}
    ]})  # fmt: skip
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "408"})
    r = client.chat.completions.create(model="policy", messages=messages, tools=tools, n=2, stop=["is"])
    assert [c.message.content for c in r.choices] == ["The answer "] * 2 and r.choices[0].finish_reason == "stop"
    return 1.0


async def hot_sampler(task: dict[str, Any], base_url: str, api_key: str) -> float:
    """One request at its own temperature; returns 5 (ignored unless reward=agent)."""
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        await client.chat.completions.create(model="m", messages=list(task["messages"]), temperature=0.5)
    return 5.0


async def protocol_edges(task: dict[str, Any], base_url: str, api_key: str) -> float:
    """A wrong key, an unknown route, a streamed completion, then a body that is not JSON."""
    good = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(base_url=base_url) as http:
        wrong = await http.get("/models", headers={"Authorization": "Bearer other"})
        assert wrong.status_code == 401, wrong.text
        unknown = await http.get("/health", headers=good)
        assert unknown.status_code == 404, unknown.text
        events = []
        body = {"prompt": "Q1 go", "stream": True, "max_tokens": 16}
        async with http.stream("POST", "/completions", headers=good, json=body) as r:
            assert r.headers["content-type"] == "text/event-stream", r.headers
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    events.append(line[len("data: ") :])
        assert events[-1] == "[DONE]", events
        chunks = [json.loads(e) for e in events[:-1]]
        assert "".join(c["choices"][0]["text"] for c in chunks) == "streamed", chunks
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop", chunks
        bad = await http.post("/completions", headers={**good, "Content-Type": "application/json"}, content=b"{")
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "json_invalid", bad.text
    return 1.0


LOGPROBS: dict[str, Any] = {}  # what asks_logprobs got back (logprobs test)


async def asks_logprobs(task: dict[str, Any], base_url: str, api_key: str) -> float:
    """A chat answer with ``logprobs: true``, a completion with ``logprobs: 0``, then ``top_logprobs: 2`` (refused)."""
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        chat = await client.chat.completions.create(model="m", messages=task["messages"], max_tokens=6, logprobs=True)
        LOGPROBS["chat"] = chat.choices[0].logprobs.model_dump()
        LOGPROBS["chat_text"] = chat.choices[0].message.content
        plain = await client.completions.create(model="m", prompt="Q1 go", max_tokens=6, logprobs=0)
        LOGPROBS["completion"] = plain.choices[0].logprobs.model_dump()
        LOGPROBS["completion_text"] = plain.choices[0].text
        try:
            await client.chat.completions.create(
                model="m", messages=task["messages"], max_tokens=6, logprobs=True, top_logprobs=2
            )
        except openai.BadRequestError as e:
            LOGPROBS["refused"] = str(e)
    return 1.0


TOOLS = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object", "properties": {}}}}]


async def requires_a_tool(task: dict[str, Any], base_url: str, api_key: str) -> float:
    """Two requests with ``tool_choice: "required"`` (as smolagents sends); the reward is the tool calls it got."""
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        messages, calls = list(task["messages"]), 0
        for _ in range(2):
            r = await client.chat.completions.create(model="m", messages=messages, tools=TOOLS, tool_choice="required")
            message = r.choices[0].message
            calls += len(message.tool_calls or [])
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls or []:
                messages.append({"role": "tool", "tool_call_id": call.id, "content": "408"})
    return float(calls)
