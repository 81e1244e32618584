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
    from verl.experimental.agent_loop.request_batcher import TurnRequest, TurnServer

    import verl.workers.rollout.request_server as new
    from verl.experimental.agent_loop import RequestBatcher, TokenOutput

    assert old is new
    assert (RequestBatcher, TurnServer, TurnRequest) == (new.BatchingRequestServer, new.RequestServer, new.TokenRequest)
    assert TokenOutput is new.TokenOutput
