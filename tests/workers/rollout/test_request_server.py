"""The engine floor's request servers (verl.workers.rollout.request_server): requests from several event loops,
budgets, closing (with its callbacks), a serving thread that dies, and the former names of
verl.experimental.agent_loop.request_batcher."""

from __future__ import annotations

import asyncio

import pytest
import torch

from verl.protocol import DataProto
from verl.workers.rollout.request_server import BatchingRequestServer, RequestServer


def echo_engine(prompts: DataProto) -> DataProto:
    """Answers every row with the ids 1, 2, ... response_length (no EOS), so budgets decide the lengths."""
    n, length = prompts.batch["input_ids"].shape[0], int(prompts.meta_info["response_length"])
    responses = torch.arange(1, length + 1).repeat(n, 1)
    return DataProto.from_dict(tensors={"responses": responses, "response_mask": torch.ones_like(responses)})


def test_batcher_cuts_each_request_to_its_budget_and_refuses_after_close() -> None:
    batcher = BatchingRequestServer(echo_engine, {"eos_token_id": 99, "pad_token_id": 0})
    closed: list[str] = []
    batcher.on_close(lambda: closed.append("first"))
    batcher.on_close(lambda: closed.append("second"))

    async def main():
        for _ in range(2):
            batcher.open_trajectory()
        return await asyncio.gather(batcher.generate([5, 6], 3), batcher.generate([7], 1))

    long, short = asyncio.run(main())
    batcher.close()
    assert closed == ["second", "first"]  # last added, first called; once
    assert long.token_ids == [1, 2, 3] and short.token_ids == [1] and long.stop_reason == "length"
    assert batcher.batch_sizes == [2]  # both waited for each other: one engine call
    with pytest.raises(RuntimeError, match="BatchingRequestServer is closed"):
        asyncio.run(batcher.generate([1], 1))
    with pytest.raises(ValueError, match="non-empty prompt"):
        asyncio.run(batcher.generate([], 1))


def test_the_engine_call_is_a_plain_one() -> None:
    seen: list[dict] = []

    def engine(prompts: DataProto) -> DataProto:
        seen.append(dict(prompts.meta_info))
        return echo_engine(prompts)

    server = BatchingRequestServer(engine, {"eos_token_id": 99, "pad_token_id": 0, "seed": 5})
    asyncio.run(server.generate([1, 2], 2))
    server.close()
    assert seen == [{"eos_token_id": 99, "pad_token_id": 0, "seed": 5, "response_length": 2}]


def test_a_dead_serving_thread_fails_the_waiting_requests() -> None:
    class Broken(RequestServer):
        def _serve(self) -> None:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
            raise RuntimeError("engine lost")

    server = Broken()
    with pytest.raises(RuntimeError, match="engine lost"):
        asyncio.run(server.generate([1, 2], 4))
    server.close()


def test_the_former_module_path_is_the_same_module() -> None:
    import verl.experimental.agent_loop.request_batcher as old
    import verl.workers.rollout.request_server as new
    from verl.experimental.agent_loop import RequestBatcher, TokenOutput
    from verl.experimental.agent_loop.request_batcher import TurnRequest, TurnServer

    assert old is new
    assert (RequestBatcher, TurnServer, TurnRequest) == (new.BatchingRequestServer, new.RequestServer, new.TokenRequest)
    assert TokenOutput is new.TokenOutput


def test_requests_with_their_own_sampling_get_their_own_engine_call() -> None:
    """Per-request temperature/top-k/stop ids/log-probs reach the engine's meta; equal settings share a call."""
    metas = []

    def engine(prompts: DataProto) -> DataProto:
        metas.append(dict(prompts.meta_info))
        n, length = prompts.batch["input_ids"].shape[0], int(prompts.meta_info["response_length"])
        responses = torch.tensor([[3, 7, 8, 9][:length]] * n)
        mask = torch.ones_like(responses)
        eos = prompts.meta_info["eos_token_id"]
        if 7 in (eos if isinstance(eos, list) else [eos]):  # the engine stops at the first EOS/stop id
            mask[:, 2:] = 0
        log_probs = torch.full(responses.shape, -0.5)
        return DataProto.from_dict(
            tensors={"responses": responses, "response_mask": mask, "rollout_log_probs": log_probs}
        )

    batcher = BatchingRequestServer(engine, {"eos_token_id": 99, "pad_token_id": 0, "temperature": 1.0})

    async def main():
        for _ in range(3):
            batcher.open_trajectory()
        return await asyncio.gather(
            batcher.generate([5], 4),
            batcher.generate([6], 4, temperature=0.3, top_k=5, stop_token_ids=[7], logprobs=True),
            batcher.generate([7], 4, logprobs=False),
        )

    plain, own, no_lp = asyncio.run(main())
    batcher.close()
    assert sorted(batcher.batch_sizes) == [1, 1, 1]
    by_temperature = {m["temperature"]: m for m in metas}
    assert by_temperature[0.3]["top_k"] == 5 and by_temperature[0.3]["eos_token_id"] == [99, 7]
    assert by_temperature[0.3]["calculate_log_probs"] is True
    assert own.token_ids == [3, 7] and own.stop_reason == "stop" and own.log_probs == [-0.5, -0.5]
    assert plain.token_ids == [3, 7, 8, 9] and plain.stop_reason == "length" and plain.log_probs is not None
    assert no_lp.log_probs is None


def test_a_trajectory_that_stops_waiting_does_not_stop_the_batcher() -> None:
    """A request cancelled while queued or in the engine (an agent timed out) is dropped; the others are served."""
    import time

    def slow(prompts: DataProto) -> DataProto:
        time.sleep(0.2)
        return echo_engine(prompts)

    batcher = BatchingRequestServer(slow, {"eos_token_id": 99, "pad_token_id": 0}, batch_wait_s=0.0)

    async def main():
        in_engine = asyncio.ensure_future(batcher.generate([1], 2))
        await asyncio.sleep(0.05)  # taken into the first engine call
        queued = asyncio.ensure_future(batcher.generate([2], 2))
        other = asyncio.ensure_future(batcher.generate([3], 2))
        await asyncio.sleep(0.01)
        in_engine.cancel()
        queued.cancel()
        return await other, await batcher.generate([4], 1)

    other, later = asyncio.run(main())
    batcher.close()
    assert other.token_ids == [1, 2] and later.token_ids == [1]
    assert batcher.batch_sizes[:2] == [1, 1]  # the cancelled queued request never reached the engine
