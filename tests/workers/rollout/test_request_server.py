"""The turn servers' shared half (verl.experimental.agent_loop.request_batcher.TurnServer): requests from several
event loops, budgets, closing, and a serving thread that dies."""

from __future__ import annotations

import asyncio

import pytest
import torch

from verl.experimental.agent_loop.request_batcher import RequestBatcher, TurnServer
from verl.protocol import DataProto


def echo_engine(prompts: DataProto) -> DataProto:
    """Answers every row with the ids 1, 2, ... response_length (no EOS), so budgets decide the lengths."""
    n, length = prompts.batch["input_ids"].shape[0], int(prompts.meta_info["response_length"])
    responses = torch.arange(1, length + 1).repeat(n, 1)
    return DataProto.from_dict(tensors={"responses": responses, "response_mask": torch.ones_like(responses)})


def test_batcher_cuts_each_request_to_its_budget_and_refuses_after_close() -> None:
    batcher = RequestBatcher(echo_engine, {"eos_token_id": 99, "pad_token_id": 0})

    async def main():
        for _ in range(2):
            batcher.open_trajectory()
        return await asyncio.gather(batcher.generate([5, 6], 3), batcher.generate([7], 1))

    long, short = asyncio.run(main())
    batcher.close()
    assert long.token_ids == [1, 2, 3] and short.token_ids == [1] and long.stop_reason == "length"
    assert batcher.batch_sizes == [2]  # both waited for each other: one engine call
    with pytest.raises(RuntimeError, match="RequestBatcher is closed"):
        asyncio.run(batcher.generate([1], 1))
    with pytest.raises(ValueError, match="non-empty prompt"):
        asyncio.run(batcher.generate([], 1))


def test_a_dead_serving_thread_fails_the_waiting_requests() -> None:
    class Broken(TurnServer):
        def _serve(self) -> None:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
            raise RuntimeError("engine lost")

    server = Broken()
    with pytest.raises(RuntimeError, match="engine lost"):
        asyncio.run(server.generate([1, 2], 4))
    server.close()
