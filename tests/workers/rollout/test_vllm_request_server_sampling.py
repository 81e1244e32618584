"""The vLLM turn server's per-request sampling (TurnSampling) on a stand-in engine: each request's SamplingParams
carry its own temperature, top-p/k, stop ids and log-probs over the batch's settings (no vLLM needed)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from omegaconf import OmegaConf

from verl.workers.rollout.vllm_request_server import VLLMRequestServer


class FakeEngine:
    """add_request/step/abort_request of vLLM's LLMEngine: each request answers [3, 7, 9] cut at a stop id."""

    def __init__(self) -> None:
        self.params: dict[str, Any] = {}
        self.pending: list[str] = []

    def add_request(self, request_id: str, prompt: dict, params: Any) -> None:
        self.params[request_id] = params
        self.pending.append(request_id)

    def step(self) -> list[Any]:
        outs = []
        for request_id in self.pending:
            stops = self.params[request_id]["stop_token_ids"]
            ids = [3, 7, 9]
            cut = next((i + 1 for i, t in enumerate(ids) if t in stops), len(ids))
            logprobs = [{t: SimpleNamespace(logprob=-0.25)} for t in ids[:cut]]
            completion = SimpleNamespace(
                token_ids=ids[:cut], logprobs=logprobs if self.params[request_id]["lp"] else None
            )
            outs.append(SimpleNamespace(request_id=request_id, finished=True, outputs=[completion]))
        self.pending = []
        return outs

    def abort_request(self, ids: list[str]) -> None:
        pass


def test_each_request_gets_its_own_sampling_params() -> None:
    engine = FakeEngine()

    def sampling_params(settings: Any, eos_ids: list[int]) -> dict[str, Any]:
        return {"temperature": settings.temperature, "top_k": settings.top_k, "top_p": settings.top_p,
                "max_tokens": settings.response_length, "stop_token_ids": list(eos_ids),
                "lp": settings.calculate_log_probs}  # fmt: skip

    config = OmegaConf.create({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "response_length": 8})
    rollout = SimpleNamespace(llm=SimpleNamespace(llm_engine=engine), config=config, tokenizer=None, _model_eos=99,
                              sampling_params=sampling_params)  # fmt: skip
    server = VLLMRequestServer(rollout, {"eos_token_id": 99, "pad_token_id": 0})

    async def main():
        plain = await server.generate([1, 2], 4)
        own = await server.generate([1, 2], 4, temperature=0.3, top_k=5, top_p=0.9, stop_token_ids=[7], logprobs=True)
        return plain, own

    try:
        plain, own = asyncio.run(main())
    finally:
        server.close()
    first, second = engine.params.values()
    assert first == {
        "temperature": 1.0,
        "top_k": -1,
        "top_p": 1.0,
        "max_tokens": 4,
        "stop_token_ids": [99],
        "lp": False,
    }
    assert second == {"temperature": 0.3, "top_k": 5, "top_p": 0.9, "max_tokens": 4, "stop_token_ids": [99, 7],
                      "lp": True}  # fmt: skip
    assert plain.token_ids == [3, 7, 9] and plain.stop_reason == "length" and plain.log_probs is None
    assert own.token_ids == [3, 7] and own.stop_reason == "stop" and own.log_probs == [-0.25, -0.25]
