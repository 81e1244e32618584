"""The vLLM request server's streaming, per-request end, cancel (abort) and ``max_batch_size`` on a stand-in engine
that emits one token per step for every running request (no vLLM needed)."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from omegaconf import OmegaConf

from verl.workers.rollout.request_server import TokenRequest, TurnSampling
from verl.workers.rollout.vllm_request_server import VLLMRequestServer


class SteppingEngine:
    """add_request/step/abort_request of vLLM's LLMEngine: each running request gains token ``len + 1`` per step
    (cumulative outputs) and finishes at its ``max_tokens``; ``running`` records the requests of each step."""

    def __init__(self) -> None:
        self.tokens: dict[str, list[int]] = {}
        self.budget: dict[str, int] = {}
        self.aborted: list[str] = []
        self.running: list[int] = []
        self.step_event = threading.Event()

    def add_request(self, request_id: str, prompt: dict, params: Any) -> None:
        self.tokens[request_id], self.budget[request_id] = [], params["max_tokens"]

    def step(self) -> list[Any]:
        self.running.append(len(self.tokens))
        outs = []
        for request_id, ids in list(self.tokens.items()):
            ids.append(len(ids) + 1)
            finished = len(ids) >= self.budget[request_id]
            completion = SimpleNamespace(token_ids=list(ids), logprobs=None)
            outs.append(SimpleNamespace(request_id=request_id, finished=finished, outputs=[completion]))
            if finished:
                del self.tokens[request_id]
        self.step_event.set()
        return outs

    def abort_request(self, ids: list[str]) -> None:
        self.aborted.extend(ids)
        for request_id in ids:
            self.tokens.pop(request_id, None)


def _server(engine: SteppingEngine, **options: Any) -> VLLMRequestServer:
    def sampling_params(settings: Any, eos_ids: list[int]) -> dict[str, Any]:
        return {"max_tokens": settings.response_length, "stop_token_ids": list(eos_ids)}

    config = OmegaConf.create({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "response_length": 8})
    rollout = SimpleNamespace(llm=SimpleNamespace(llm_engine=engine), config=config, tokenizer=None, _model_eos=99,
                              sampling_params=sampling_params)  # fmt: skip
    return VLLMRequestServer(rollout, {"eos_token_id": 99, "pad_token_id": 0}, **options)


def test_tokens_stream_and_a_request_its_callback_ends_is_aborted() -> None:
    engine = SteppingEngine()
    server = _server(engine, batch_wait_s=0.2, max_batch_size=2)
    seen: list[int] = []
    stopper = TokenRequest([1], 50, sampling=TurnSampling(), on_token=lambda t, ends: seen.append(t) or t == 3)
    plain = TokenRequest([2], 5)
    queued = TokenRequest([3], 2)  # beyond max_batch_size: waits for a free slot
    for request in (stopper, plain, queued):
        server.submit(request)
    out = stopper.future.result(timeout=10)
    assert (out.token_ids, out.stop_reason, seen) == ([1, 2, 3], "stop", [1, 2, 3])
    assert plain.future.result(timeout=10).token_ids == [1, 2, 3, 4, 5]
    assert queued.future.result(timeout=10).token_ids == [1, 2]
    server.close()
    assert len(engine.aborted) == 1  # the stopped request, aborted in the engine
    assert max(engine.running) == 2 and engine.running[0] == 2  # held open for both, never more than 2


def test_a_cancelled_request_is_aborted_and_answered() -> None:
    engine = SteppingEngine()
    server = _server(engine)
    request = server.submit(TokenRequest([1], 10_000))
    assert engine.step_event.wait(10)
    request.cancel()
    out = request.future.result(timeout=10)
    server.close()
    assert out.stop_reason == "cancelled" and len(out.token_ids) < 10_000
    assert len(engine.aborted) == 1
