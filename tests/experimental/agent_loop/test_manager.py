"""The driver's AgentLoopManager over worker groups: each rank's own request server on the local backend (a sample
group's trajectories on one rank), and the waiting turns batched into one data-parallel ``generate_sequences`` call
on a group whose ranks live elsewhere (Ray's case; here a group of the same shape in this process)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import numpy as np
import torch

from tests.experimental.agent_loop.conftest import ScriptedEngine, chat_tokenizer, prompt_batch, rollout_config
from verl.experimental.agent_loop.manager import AgentLoopManager
from verl.experimental.agent_loop.runner import place_groups
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.base.futures import completed_future
from verl.single_controller.base.worker_group import ClassWithInitArgs, WorkerGroup
from verl.single_controller.local.worker_group import LocalWorkerGroup
from verl.workers.rollout.request_server import BatchingRequestServer

SCRIPTS = {f"Q{k}": [f"answer {k}"] for k in range(4)}


class ScriptedWorker(Worker):
    """An actor worker's rollout surface over a :class:`ScriptedEngine`; ``calls`` records (kind, prompts)."""

    def __init__(self, scripts: dict[str, list[str]]) -> None:
        self.engine = ScriptedEngine(chat_tokenizer(), scripts)
        self.calls: list[tuple[str, list[str]]] = []
        self.closed = 0
        self.holds: list[bool] = []

    def _generate(self, prompts: Any) -> Any:
        tok = self.engine.tokenizer
        texts = [
            tok.decode(ids[m.bool()].tolist())
            for ids, m in zip(prompts.batch["input_ids"], prompts.batch["attention_mask"])
        ]
        self.calls.append(("generate", texts))
        return self.engine(prompts)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def open_request_server(self, meta_info: dict[str, Any]) -> BatchingRequestServer:
        # every trajectory is registered before its first turn, so the batch forms once all have queued; the long cap
        # only keeps a loaded machine (threads starting late) from splitting it, which the test counts
        server = BatchingRequestServer(self._generate, meta_info, batch_wait_s=30.0)
        server.on_close(self._count_close)
        return server

    def _count_close(self) -> None:
        self.closed += 1

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: Any) -> Any:
        assert self.holds and self.holds[-1], "generate_sequences outside hold_generation"
        return self._generate(prompts)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def hold_generation(self, hold: bool) -> None:
        self.holds.append(hold)


class RemoteLikeGroup(WorkerGroup):
    """A worker group that is not the local backend (as a Ray group is), its ranks kept here for the test."""

    def __init__(self, workers: list[Worker]) -> None:
        super().__init__(world_size=len(workers))
        self.workers = workers
        self._bind_worker_methods(ScriptedWorker)

    def _worker_user_cls(self) -> type:
        return ScriptedWorker

    def _call_rank_async(self, rank: int, method_name: str, args: tuple, kwargs: dict) -> Future:
        return completed_future(getattr(self.workers[rank], method_name)(*args, **kwargs))

    def _wait(self, futures: list[Any]) -> list[Any]:
        return [f.result() for f in futures]


def _grouped_batch(n: int) -> Any:
    """Two prompts, each repeated ``n`` times next to each other (the interleaved ``rollout.n`` layout)."""
    return prompt_batch(chat_tokenizer(), ["Q0 ?", "Q1 ?"]).repeat(repeat_times=n, interleave=True)


def test_local_group_ranks_serve_their_own_sample_groups() -> None:
    group = LocalWorkerGroup(ClassWithInitArgs(ScriptedWorker, SCRIPTS), world_size=2)
    manager = AgentLoopManager(rollout_config(response_length=16), chat_tokenizer(), group)
    out = manager.generate_sequences(_grouped_batch(3))
    texts = [
        chat_tokenizer().decode(r[m.bool()].tolist())
        for r, m in zip(out.batch["responses"], out.batch["response_mask"])
    ]
    assert texts == ["answer 0<eos>"] * 3 + ["answer 1<eos>"] * 3
    # each rank generated one sample group's three trajectories, in one engine call; its server was closed
    seen = [[t for _, texts_ in w.calls for t in texts_] for w in group.workers]
    assert [len(s) for s in seen] == [3, 3] and all("Q0" in t for t in seen[0]) and all("Q1" in t for t in seen[1])
    assert [len(w.calls) for w in group.workers] == [1, 1] and [w.closed for w in group.workers] == [1, 1]
    assert manager.last_batch_sizes == [3, 3]


def test_remote_group_gets_the_waiting_turns_in_one_data_parallel_call() -> None:
    workers = [ScriptedWorker(SCRIPTS), ScriptedWorker(SCRIPTS)]
    manager = AgentLoopManager(rollout_config(response_length=16), chat_tokenizer(), RemoteLikeGroup(workers))
    out = manager.generate_sequences(_grouped_batch(3)[:5])  # 5 rows over 2 ranks: padded to 6, then cut
    assert out.batch["responses"].shape[0] == 5
    assert manager.last_batch_sizes == [5]  # one batch of every waiting turn, split over the ranks
    assert [len(w.calls) for w in workers] == [1, 1] and [len(w.calls[0][1]) for w in workers] == [3, 3]
    assert all(w.closed == 0 for w in workers)  # no server opened on the ranks
    assert all(w.holds == [True, False] for w in workers)  # held ready for the batch, released after it


def test_one_engine_or_one_worker_in_this_process_serves_directly() -> None:
    from verl.workers.rollout.base import BaseRollout

    scripted = ScriptedEngine(chat_tokenizer(), SCRIPTS)

    class Engine(BaseRollout):
        def generate_sequences(self, prompts: Any) -> Any:
            return scripted(prompts)

    worker = ScriptedWorker(SCRIPTS)  # one worker, no group (the asynchronous rollouter's case)
    for target in (Engine(), worker):
        manager = AgentLoopManager(rollout_config(response_length=16), chat_tokenizer(), target)
        assert manager.generate_sequences(_grouped_batch(2)).batch["responses"].shape[0] == 4
    assert scripted.batch_sizes == [4] and len(worker.calls) == 1 and worker.closed == 1


def test_place_groups_keeps_runs_of_one_prompt_on_one_rank() -> None:
    ids = torch.tensor([[1, 2]] * 3 + [[3, 4]] * 3 + [[5, 6]] * 2)
    mask = torch.ones_like(ids)
    assert place_groups(ids, mask, 1) == [0] * 8
    assert place_groups(ids, mask, 2) == [0, 0, 0, 1, 1, 1, 1, 1]
    assert place_groups(ids, mask, 4) == [0, 0, 0, 2, 2, 2, 3, 3]
    assert len(set(place_groups(ids, torch.zeros_like(ids), 2))) == 1  # all padding: one run, one rank
    single = torch.arange(6).reshape(6, 1)
    assert place_groups(single, torch.ones_like(single), 3) == [0, 0, 1, 1, 2, 2]
    assert np.array_equal(np.bincount(place_groups(single, torch.ones_like(single), 2)), [3, 3])
