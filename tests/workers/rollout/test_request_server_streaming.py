"""What ``verl serve`` needs from the request server: tokens as they are sampled (``on_token``), a request answered
when it ends rather than when its batch does (the engine's per-step hook), cancellation, ``max_batch_size`` and the
start/batch observers."""

from __future__ import annotations

import asyncio
import threading
import time

import torch

from verl.protocol import DataProto
from verl.workers.rollout.request_server import BatchingRequestServer, TokenRequest, TurnSampling

EOS = 99


def stepping_engine(delay_s: float, log: list[str]):
    """An engine with a per-step hook: row ``i`` samples ``1, 2, 3, ...``, except a prompt starting with 7 samples
    EOS at its second step; rows the hook stops get padding (0). Records each call's end in ``log``."""

    def generate(prompts: DataProto, on_step=None) -> DataProto:
        ids = prompts.batch["input_ids"]
        first = [int(row[mask.bool()][0]) for row, mask in zip(ids, prompts.batch["attention_mask"])]
        n, length = ids.shape[0], int(prompts.meta_info["response_length"])
        responses = torch.zeros((n, length), dtype=torch.long)
        done = torch.zeros(n, dtype=torch.bool)
        for step in range(length):
            tokens = torch.tensor([EOS if f == 7 and step == 1 else step + 1 for f in first])
            tokens[done] = 0
            responses[:, step] = tokens
            done |= tokens == EOS
            done |= on_step(step, slice(0, n), tokens, done.clone())
            if done.all():
                break
            time.sleep(delay_s)
        log.append(f"call of {n} ended")
        return DataProto.from_dict(tensors={"responses": responses, "response_mask": torch.ones_like(responses)})

    return generate


def _request(prompt: list[int], budget: int, on_token=None) -> TokenRequest:
    return TokenRequest(prompt, budget, sampling=TurnSampling(logprobs=False), on_token=on_token)


def test_each_request_streams_and_is_answered_when_it_ends() -> None:
    log: list[str] = []
    seen: dict[str, list[tuple[int, bool]]] = {"short": [], "stopper": [], "eos": []}

    def recorder(name, stop_at=None):
        def on_token(token: int, ends: bool) -> bool:
            seen[name].append((token, ends))
            return token == stop_at

        return on_token

    server = BatchingRequestServer(
        stepping_engine(0.02, log), {"eos_token_id": EOS, "pad_token_id": 0}, batch_wait_s=0.05, step_hook=True
    )
    requests = {
        "short": _request([1], 2, recorder("short")),
        "stopper": _request([2], 50, recorder("stopper", stop_at=4)),  # its callback ends it (a stop string)
        "eos": _request([7], 50, recorder("eos")),
        "long": _request([3], 12),
    }
    answered: dict[str, float] = {}
    for name, request in requests.items():
        request.future.add_done_callback(lambda f, name=name: answered.setdefault(name, time.monotonic()))
        server.submit(request)
    outs = {name: r.future.result(timeout=10) for name, r in requests.items()}
    server.close()
    assert server.batch_sizes == [4] and log == ["call of 4 ended"]
    assert (outs["short"].token_ids, outs["short"].stop_reason) == ([1, 2], "length")
    assert (outs["stopper"].token_ids, outs["stopper"].stop_reason) == ([1, 2, 3, 4], "stop")
    assert (outs["eos"].token_ids, outs["eos"].stop_reason) == ([1, EOS], "eos")
    assert (outs["long"].token_ids, outs["long"].log_probs) == (list(range(1, 13)), None)
    assert seen["short"] == [(1, False), (2, False)] and seen["eos"] == [(1, False), (EOS, True)]
    assert seen["stopper"] == [(1, False), (2, False), (3, False), (4, False)]  # nothing after it said stop
    # the short ones came back while the long one was still decoding (about 10 steps of 20 ms later)
    assert answered["long"] - max(answered["short"], answered["eos"], answered["stopper"]) > 0.1


def test_a_cancelled_request_stops_and_the_others_go_on() -> None:
    log: list[str] = []
    server = BatchingRequestServer(
        stepping_engine(0.02, log), {"eos_token_id": EOS, "pad_token_id": 0}, batch_wait_s=0.05, step_hook=True
    )
    first_token = threading.Event()
    gone = _request([1], 40, lambda token, ends: first_token.set() or False)
    stays = server.submit(_request([2], 15))
    server.submit(gone)
    assert first_token.wait(10)
    gone.cancel()
    out = gone.future.result(timeout=10)
    assert out.stop_reason == "cancelled" and 1 <= len(out.token_ids) < 15
    assert not stays.future.done()  # still decoding when the cancelled one came back
    assert stays.future.result(timeout=10).token_ids == list(range(1, 16))
    queued = _request([3], 5)
    queued.cancel()  # cancelled before it started: never decoded
    server.submit(queued)
    assert queued.future.result(timeout=10).token_ids == []
    server.close()
    assert server.batch_sizes == [2]


def test_max_batch_size_and_the_observers() -> None:
    started: list[float] = []
    sizes: list[int] = []
    server = BatchingRequestServer(
        stepping_engine(0.0, []), {"eos_token_id": EOS, "pad_token_id": 0}, batch_wait_s=0.2, step_hook=True,
        max_batch_size=2, on_start=lambda r: started.append(r.started_at - r.enqueued_at), on_batch=sizes.append,
    )  # fmt: skip

    async def main():
        return await asyncio.gather(*(server.generate([i + 1], 3, logprobs=False) for i in range(5)))

    t0 = time.monotonic()
    outs = asyncio.run(main())
    server.close()
    assert [o.token_ids for o in outs] == [[1, 2, 3]] * 5
    assert sizes == server.batch_sizes == [2, 2, 1]
    assert len(started) == 5 and all(w >= 0 for w in started)
    # full batches did not wait for batch_wait_s; only the last (single) one did
    assert time.monotonic() - t0 < 0.2 + 1.0


def test_without_a_step_hook_the_tokens_arrive_after_the_call_and_can_still_be_cut() -> None:
    def engine(prompts: DataProto) -> DataProto:
        n, length = prompts.batch["input_ids"].shape[0], int(prompts.meta_info["response_length"])
        responses = torch.arange(1, length + 1).repeat(n, 1)
        return DataProto.from_dict(tensors={"responses": responses, "response_mask": torch.ones_like(responses)})

    server = BatchingRequestServer(engine, {"eos_token_id": EOS, "pad_token_id": 0}, batch_wait_s=0.0)
    tokens: list[int] = []
    request = server.submit(_request([5], 6, lambda token, ends: tokens.append(token) or token == 3))
    out = request.future.result(timeout=10)
    server.close()
    assert tokens == [1, 2, 3] and out.token_ids == [1, 2, 3] and out.stop_reason == "stop"
