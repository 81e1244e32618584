"""The service on vLLM's engine (``--engine auto`` picks it where vLLM is usable): batching, streaming, stop
strings, cancellation, and the same greedy answers as the project's engine."""

from __future__ import annotations

import asyncio
import importlib.util

import httpx
import pytest

from verl.models.tiny import TinyModelSpec, make_tiny_model_dir
from verl.serve import ServeConfig

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed"),
]

# vLLM's CPU attention needs head_dim >= 32: 128 hidden / 2 heads = 64
SPEC = TinyModelSpec(arch="qwen2", hidden_size=128, num_attention_heads=2, num_key_value_heads=1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return make_tiny_model_dir(str(tmp_path_factory.mktemp("vllm_serve_tiny")), spec=SPEC)


def _greedy(url: str, prompts: list[str], **kw) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, timeout=120) as c:
            return await asyncio.gather(
                *(c.post("/generate", json={"prompt": p, "max_new_tokens": 6, "temperature": 0.0, **kw})
                  for p in prompts)
            )  # fmt: skip

    return asyncio.run(run())


def test_vllm_engine_serves_batches_like_the_hf_engine(model_dir, start_server, metric):
    prompts = ["abc", "hello there", "x", "a longer prompt than the others"]
    common = dict(model=model_dir, dtype="float32", batch_wait_ms=300, max_new_tokens=64)
    with start_server(ServeConfig(engine="hf", **common)) as srv:
        expected = [r.json()["response"] for r in _greedy(srv.url, prompts)]
    with start_server(ServeConfig(engine="auto", **common)) as srv:
        assert httpx.get(srv.url + "/health").json()["engine"] == "vllm"
        responses = _greedy(srv.url, prompts)
        assert [r.status_code for r in responses] == [200] * 4, [r.text for r in responses]
        assert [r.json()["response"] for r in responses] == expected
        text = httpx.get(srv.url + "/metrics").text
        # one observation per engine step (continuous batching): the four were decoded together
        steps = metric(text, "verl_serve_batch_size_count")
        assert steps >= 1 and metric(text, "verl_serve_batch_size_sum") / steps > 2
        # streaming and a stop string, per request, in one batch with a plain request
        full = expected[0]
        stop = full[2:4]
        cut, plain = _greedy(srv.url, ["abc", "abc"], stop=stop)[0], _greedy(srv.url, ["abc"])[0]
        assert cut.json()["response"] == full[: full.find(stop)] and cut.json()["finish_reason"] == "stop"
        assert plain.json()["response"] == full
        body = {"prompt": "abc", "max_new_tokens": 6, "temperature": 0.0, "stream": True}
        with httpx.stream("POST", srv.url + "/generate", json=body, timeout=120) as r:
            pieces = [line for line in r.iter_lines() if line.startswith("data: {")]
        assert len(pieces) >= 2
