"""The service's endpoints over real HTTP: generation, OpenAI shapes, batching, streaming, errors."""

from __future__ import annotations

import asyncio
import json

import httpx


def _generate(client: httpx.Client, prompt: str = "hello", **kw) -> httpx.Response:
    return client.post("/generate", json={"prompt": prompt, **kw})


def test_generate_returns_response_and_usage(client, byte_tokenizer):
    r = _generate(client, "hello", max_new_tokens=8, temperature=0.0)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) >= {"response", "usage", "finish_reason"}
    usage = body["usage"]
    assert usage["prompt_tokens"] == len(byte_tokenizer("hello")["input_ids"])
    assert 1 <= usage["completion_tokens"] <= 8
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    # greedy is deterministic across requests (and batches)
    assert _generate(client, "hello", max_new_tokens=8, temperature=0.0).json()["response"] == body["response"]


def test_concurrent_requests_are_batched(server, metric):
    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as c:
            reqs = [
                c.post("/generate", json={"prompt": f"p{i}", "max_new_tokens": 4 + i, "temperature": 0.0})
                for i in range(8)
            ]
            return await asyncio.gather(*reqs)

    before = httpx.get(server.url + "/metrics").text
    responses = asyncio.run(burst())
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    # per-request max_new_tokens is honoured inside the shared batch
    for i, r in enumerate(responses):
        assert r.json()["usage"]["completion_tokens"] <= 4 + i
    after = httpx.get(server.url + "/metrics").text
    batches = metric(after, "verl_serve_batch_size_count") - metric(before, "verl_serve_batch_size_count")
    rows = metric(after, "verl_serve_batch_size_sum") - metric(before, "verl_serve_batch_size_sum")
    assert rows == 8
    assert batches <= 2, f"8 concurrent requests took {batches} batches: not batched"


def test_batched_greedy_matches_single(client, server):
    single = _generate(client, "abc", max_new_tokens=6, temperature=0.0).json()["response"]

    async def together() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as c:
            reqs = [
                c.post("/generate", json={"prompt": p, "max_new_tokens": 6, "temperature": 0.0})
                for p in ("abc", "a much longer prompt that pads the other rows")
            ]
            return await asyncio.gather(*reqs)

    assert asyncio.run(together())[0].json()["response"] == single


def test_openai_completions_and_models(client):
    models = client.get("/v1/models").json()
    name = models["data"][0]["id"]
    r = client.post("/v1/completions", json={"model": name, "prompt": ["ab", "cd"], "max_tokens": 3, "n": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "text_completion" and body["model"] == name
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert all(c["finish_reason"] in ("stop", "length") for c in body["choices"])
    assert body["usage"]["prompt_tokens"] == 4 * 2


def test_chat_uses_the_chat_template(client, byte_tokenizer):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    r = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 4, "temperature": 0.0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant"
    rendered = byte_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert body["usage"]["prompt_tokens"] == len(rendered.encode())
    # the same text through /v1/completions gives the same greedy answer
    plain = client.post("/v1/completions", json={"prompt": rendered, "max_tokens": 4, "temperature": 0.0}).json()
    assert plain["choices"][0]["text"] == body["choices"][0]["message"]["content"]


def _sse_events(response: httpx.Response) -> list[dict | str]:
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def test_chat_streaming_sse(client):
    payload = {"messages": [{"role": "user", "content": "stream"}], "max_tokens": 12, "temperature": 0.0}
    full = client.post("/v1/chat/completions", json=payload).json()["choices"][0]["message"]["content"]
    with client.stream("POST", "/v1/chat/completions", json={**payload, "stream": True}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = _sse_events(r)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == full
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert len(chunks) >= 3  # role, at least one piece, final


def test_generate_streaming_and_stop_string(client):
    full = _generate(client, "xyz", max_new_tokens=16, temperature=0.0).json()
    text = full["response"]
    assert len(text) >= 4, "need a few characters to cut at"
    stop = text[2:4]
    cut = _generate(client, "xyz", max_new_tokens=16, temperature=0.0, stop=stop).json()
    assert cut["response"] == text[: text.find(stop)]
    assert cut["finish_reason"] == "stop"
    with client.stream("POST", "/generate", json={"prompt": "xyz", "max_new_tokens": 16, "temperature": 0.0,
                                                  "stream": True}) as r:  # fmt: skip
        events = _sse_events(r)
    assert "".join(e["response"] for e in events[:-1]) == text
    assert events[-2]["usage"] == full["usage"]


def _error(r: httpx.Response, status: int, param: str) -> str:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param, err
    assert param in err["message"]
    return err["message"]


def test_errors_name_the_field(client):
    _error(client.post("/generate", json={"max_new_tokens": 4}), 422, "prompt")
    _error(client.post("/generate", json={"prompt": 5}), 422, "prompt")
    _error(client.post("/generate", json={"prompt": "x", "max_new_tokens": "8"}), 422, "max_new_tokens")
    _error(client.post("/generate", json={"prompt": "x", "top_p": 0}), 422, "top_p")
    _error(client.post("/generate", json={"prompt": "x", "temprature": 0.5}), 422, "temprature")
    _error(client.post("/generate", json={"prompt": ""}), 400, "prompt")
    _error(client.post("/generate", json={"prompt": "x", "max_new_tokens": 65}), 400, "max_new_tokens")
    # the tiny model's context is 512 positions (one token per byte)
    msg = _error(client.post("/generate", json={"prompt": "y" * 600}), 400, "prompt")
    assert "512" in msg
    long_prompt = "y" * 480
    _error(client.post("/generate", json={"prompt": long_prompt, "max_new_tokens": 40}), 400, "max_new_tokens")
    _error(client.post("/v1/completions", json={"model": "nope", "prompt": "x"}), 404, "model")
    _error(client.post("/v1/chat/completions", json={"messages": [{"role": "user"}]}), 422, "messages")
    _error(client.post("/v1/completions", json={"prompt": "x", "logprobs": 2}), 400, "logprobs")
    r = client.post("/generate", content=b'{"prompt": ', headers={"content-type": "application/json"})
    _error(r, 422, "body")


def test_metrics_exposition(client, metric):
    _generate(client, "m", max_new_tokens=2)
    text = client.get("/metrics").text
    for name in (
        "verl_serve_requests_total",
        "verl_serve_generated_tokens_total",
        "verl_serve_request_latency_seconds_bucket",
        "verl_serve_queue_depth",
        "verl_serve_batch_size_bucket",
        "verl_serve_memory_used_bytes",
    ):
        assert name in text, name
    assert 'verl_serve_requests_total{endpoint="/generate",status="200"}' in text
    assert metric(text, "verl_serve_generated_tokens_total") > 0
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["engine"] == "hf"
