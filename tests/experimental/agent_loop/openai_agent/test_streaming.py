"""Token-by-token streaming on the rollout's OpenAI endpoint: the chunks leave while the engine decodes (the request
server's per-token callback), concatenate to the whole answer's text, hold back stop strings and tool calls, and the
recorded trajectory is the one the non-streamed answer records; a client that goes away cancels the engine request."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import torch

from verl.experimental.agent_loop.openai_agent.endpoint import TrajectoryEndpoint
from verl.experimental.agent_loop.openai_agent.http import LoopbackServer
from verl.experimental.agent_loop.openai_agent.streaming import ContentHold, TextDeltas
from verl.experimental.agent_loop.openai_agent.trajectory import TrajectoryRecorder
from verl.experimental.agent_loop.tool_parser import ToolParser
from verl.models.tiny import make_byte_tokenizer
from verl.protocol import DataProto
from verl.workers.rollout.base import build_rollout_output, resolve_special_ids
from verl.workers.rollout.request_server import BatchingRequestServer

openai = pytest.importorskip("openai")  # the agents extra (in dev)

CALC = '<tool_call>{"name": "calculator", "arguments": {"expression": "12*34"}}</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object", "properties": {}}}}]


class StepEngine:
    """A decode loop with the hf engine's per-step hook: each row's reply (``replies[Q<k>]`` plus EOS, by the name in
    its prompt) one token per step, ``step_s`` apart; the rows the hook stops end there. Counts its steps."""

    def __init__(self, tokenizer: Any, replies: dict[str, str], step_s: float = 0.0) -> None:
        self.tokenizer, self.replies, self.step_s = tokenizer, replies, step_s
        self.steps = 0
        self.last_step_at = 0.0

    def __call__(self, prompts: DataProto, on_step: Callable[..., Any] | None = None) -> DataProto:
        eos, pad = resolve_special_ids(prompts.meta_info, self.tokenizer)
        length = int(prompts.meta_info["response_length"])
        rows = []
        for ids, mask in zip(prompts.batch["input_ids"], prompts.batch["attention_mask"]):
            name = re.search(r"Q\d+", self.tokenizer.decode(ids[mask.bool()].tolist())).group(0)
            rows.append((self.tokenizer.encode(self.replies[name], add_special_tokens=False) + [eos[0]])[:length])
        n = len(rows)
        responses = torch.full((n, length), pad, dtype=torch.long)
        lengths = torch.full((n,), length, dtype=torch.long)
        done = torch.zeros(n, dtype=torch.bool)
        for step in range(max(len(r) for r in rows)):
            if bool(done.all()):
                break
            time.sleep(self.step_s)
            self.steps += 1
            self.last_step_at = time.monotonic()
            tokens = torch.tensor([r[step] if step < len(r) and not done[i] else pad for i, r in enumerate(rows)])
            responses[:, step] = torch.where(done, torch.full_like(tokens, pad), tokens)
            finished = done | (tokens == eos[0])
            stop = on_step(step, slice(0, n), tokens, finished) if on_step is not None else None
            if stop is not None:
                lengths = torch.where(stop & ~done & ~finished, torch.clamp(lengths, max=step + 1), lengths)
                finished = finished | stop
            done = finished
        return build_rollout_output(prompts, responses, eos, pad, length, lengths=lengths)


class Trajectory:
    """One trajectory's endpoint over a request server, served on 127.0.0.1 (use as ``async with``)."""

    def __init__(self, tok: Any, generate_batch: Callable[..., DataProto], step_hook: bool = True) -> None:
        meta = {"eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}
        self.server = BatchingRequestServer(generate_batch, meta, 0.0, step_hook=step_hook)
        self.recorder = TrajectoryRecorder(tok, tok.eos_token_id, 512, 512)
        parser = ToolParser.get_tool_parser("hermes", tok)
        self.endpoint = TrajectoryEndpoint(self.server, tok, parser, self.recorder, "key", "policy", 16, True)
        self.http = LoopbackServer(self.endpoint)

    async def __aenter__(self) -> Trajectory:
        self.base_url = f"http://127.0.0.1:{await self.http.start()}/v1"
        self.client = openai.AsyncOpenAI(base_url=self.base_url, api_key="key", max_retries=0)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.client.close()
        await self.http.close()
        self.server.close()


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def test_chunks_leave_while_the_engine_decodes_and_concatenate_to_the_answer() -> None:
    tok = make_byte_tokenizer()
    tok.chat_template = None
    answer = "streamed token by token"
    engine = StepEngine(tok, {"Q1": answer}, step_s=0.01)

    async def main() -> None:
        async with Trajectory(tok, engine) as t:
            stream = await t.client.completions.create(
                model="policy", prompt="Q1 go", stream=True, stream_options={"include_usage": True}
            )
            chunks, first_at, steps_at_first = [], None, None
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].text and first_at is None:
                    first_at, steps_at_first = time.monotonic(), engine.steps
                chunks.append(chunk)
            texts = [c.choices[0].text for c in chunks if c.choices]
            assert "".join(texts) == answer and len([x for x in texts if x]) > 2, texts
            # the first piece arrived while the engine was still decoding (after its first steps, not its last)
            assert steps_at_first < len(answer) and first_at < engine.last_step_at, (steps_at_first, engine.steps)
            assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
            usage = chunks[-1].usage  # include_usage: a last chunk with no choices
            assert not chunks[-1].choices and usage.completion_tokens == len(answer) + 1  # its EOS too
            assert all(c.usage is None for c in chunks[:-1])
            seg = t.recorder.current
            assert seg.pending[0].ids == tok.encode(answer, add_special_tokens=False) + [tok.eos_token_id]

    asyncio.run(main())


def test_a_stop_string_ends_the_request_and_never_reaches_the_client(kit) -> None:
    tok = kit.chat_tokenizer()
    engine = StepEngine(tok, {"Q1": "The answer is 408 and that is all"}, step_s=0.005)

    async def main() -> None:
        async with Trajectory(tok, engine) as t:
            stream = await t.client.chat.completions.create(
                model="policy", messages=_user("Q1"), stream=True, stop=["is 4", "zzz"]
            )
            pieces, finish = [], None
            async for chunk in stream:
                pieces.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
            assert "".join(pieces) == "The answer " and finish == "stop", pieces
            assert len([p for p in pieces if p]) > 1  # streamed piece by piece, the stop string never sent
            # the request ended at the token that completed the stop string: no decode steps after it
            assert engine.steps == len("The answer is 4")
            assert t.recorder.current.pending[0].ids == tok.encode("The answer is 4", add_special_tokens=False)

    asyncio.run(main())


def test_text_deltas_hold_back_partial_characters_and_stop_prefixes() -> None:
    tok = make_byte_tokenizer()
    text = "héllo → wörld"
    ids = tok.encode(text, add_special_tokens=False)
    deltas = TextDeltas(tok, ("wö", "→ x"))
    out = [deltas.add([(i, False)]) for i in ids]
    assert all("\ufffd" not in d for d in out)  # a multi-byte character goes out whole
    assert "".join(out) == "héllo → "  # "→ " could start "→ x": held until "w" came; "wö" is a stop string
    assert "".join(out) + deltas.finish("héllo → ") == "héllo → "
    hold = ContentHold("<tool_call>")
    pieces = ["Let me", " compute.", "\n", "<tool", "_call>{"]
    assert [hold.feed(p) for p in pieces] == ["Let me", " compute.", "", "", ""]
    assert hold.content == "Let me compute."


async def _stream_message(client: Any, **request: Any) -> tuple[Any, list[Any]]:
    chunks = []
    async with client.chat.completions.stream(model="policy", **request) as stream:
        async for event in stream:
            if event.type == "chunk":
                chunks.append(event.chunk)
        final = await stream.get_final_completion()
    return final, chunks


def test_tool_calls_stream_as_tool_calls_deltas_and_the_sdk_assembles_the_plain_answer(kit) -> None:
    tok = kit.chat_tokenizer()
    reply = "Let me compute.\n" + CALC
    request = {"messages": _user("Q1 12*34?"), "tools": TOOLS}

    async def main() -> None:
        async with Trajectory(tok, StepEngine(tok, {"Q1": reply})) as t:
            plain = await t.client.chat.completions.create(model="policy", **request)
        # 10 ms a step: a stream reader on a loaded machine keeps up, so the content arrives in several chunks
        async with Trajectory(tok, StepEngine(tok, {"Q1": reply}, step_s=0.01)) as t:
            final, chunks = await _stream_message(t.client, **request)
            streamed_ids = t.recorder.current.pending[0].ids
        content = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
        assert "".join(content) == "Let me compute." and len(content) > 1 and not any("<" in p for p in content)
        call_chunks = [c for c in chunks if c.choices[0].delta.tool_calls]
        assert len(call_chunks) == 1 and call_chunks[0].choices[0].delta.tool_calls[0].id.startswith("call_")
        got, want = final.choices[0], plain.choices[0]
        assert (got.finish_reason, want.finish_reason) == ("tool_calls", "tool_calls")
        assert got.message.content == want.message.content == "Let me compute."
        fn = [(c.function.name, json.loads(c.function.arguments)) for c in got.message.tool_calls]
        assert fn == [(c.function.name, json.loads(c.function.arguments)) for c in want.message.tool_calls]
        assert fn == [("calculator", {"expression": "12*34"})]
        assert streamed_ids == tok.encode(reply, add_special_tokens=False) + [tok.eos_token_id]

    asyncio.run(main())


def test_streamed_and_plain_answers_record_the_same_trajectory_on_the_hf_engine() -> None:
    """A random tiny model samples arbitrary bytes (partial UTF-8 characters); two turns streamed and two plain,
    same seed: the same ids, log-probs and mask; the streamed text equals the plain text."""
    from omegaconf import OmegaConf

    from verl.models.tiny import make_tiny_causal_lm
    from verl.workers.rollout.hf_rollout import HFRollout

    tok = make_byte_tokenizer()

    def engine() -> Any:
        config = OmegaConf.create({"name": "hf", "temperature": 1.0, "top_p": 1.0, "top_k": -1, "do_sample": True,
                                   "prompt_length": 64, "response_length": 16, "min_new_tokens": 0,
                                   "dtype": "float32", "max_num_seqs": 8, "calculate_log_probs": True,
                                   "seed": 0})  # fmt: skip
        return HFRollout(make_tiny_causal_lm(seed=0), config, tokenizer=tok).generate_sequences

    async def conversation(stream: bool) -> tuple[list[str], Any]:
        texts = []
        async with Trajectory(tok, engine()) as t:
            messages = _user("hello")
            for _ in range(2):
                body = {"model": "policy", "messages": messages, "max_tokens": 12, "logprobs": True}
                if stream:
                    parts, logprobs = [], []
                    async for chunk in await t.client.chat.completions.create(**body, stream=True):
                        parts.append(chunk.choices[0].delta.content or "")
                        if chunk.choices[0].logprobs is not None:
                            logprobs += chunk.choices[0].logprobs.content
                    text = "".join(parts)
                else:
                    answer = (await t.client.chat.completions.create(**body)).choices[0]
                    text, logprobs = answer.message.content, answer.logprobs.content
                texts.append((text, [(e.token, e.logprob) for e in logprobs]))
                messages = [*messages, {"role": "assistant", "content": text}, {"role": "user", "content": "more"}]
            return texts, t.recorder.finish()

    streamed_texts, streamed = asyncio.run(conversation(True))
    plain_texts, plain = asyncio.run(conversation(False))
    assert streamed_texts == plain_texts
    assert any("\ufffd" in text or not text.isascii() for text, _ in plain_texts)  # multi-byte pieces were sampled
    assert len(streamed) == len(plain) == 1 and streamed[0].model_turns == 2
    assert streamed[0].response_ids == plain[0].response_ids
    assert streamed[0].response_mask == plain[0].response_mask
    assert streamed[0].log_probs == plain[0].log_probs and streamed[0].has_log_probs


def test_a_client_that_goes_away_cancels_the_request_and_fails_the_trajectory(kit) -> None:
    tok = kit.chat_tokenizer()
    engine = StepEngine(tok, {"Q1": "x" * 200, "Q2": "fine"}, step_s=0.01)

    async def main() -> None:
        async with Trajectory(tok, engine) as t:
            body = {"model": "policy", "messages": _user("Q1"), "stream": True}
            async with httpx.AsyncClient(base_url=t.base_url) as http:
                async with http.stream("POST", "/chat/completions", json=body,
                                       headers={"Authorization": "Bearer key"}) as r:  # fmt: skip
                    async for line in r.aiter_lines():
                        if '"content": "x' in line:
                            break  # leave mid-answer: the connection is closed
            for _ in range(100):
                if t.server.running == 0 and t.endpoint.failure is not None:
                    break
                await asyncio.sleep(0.02)
            assert t.endpoint.failure is not None and t.endpoint.failure[0] == "stream_closed"
            assert engine.steps < 100  # cancelled long before its 201 tokens
            # the trajectory's lock was released: its next request is served
            again = await t.client.chat.completions.create(model="policy", messages=_user("Q2"))
            assert again.choices[0].message.content == "fine"

    asyncio.run(main())


class VLLMStandIn:
    """``add_request`` / ``step`` / ``abort_request`` of vLLM's engine: each request's reply (by the ``Q<k>`` of its
    prompt, then EOS) one token per step, cumulative outputs as vLLM reports them."""

    def __init__(self, tokenizer: Any, replies: dict[str, str]) -> None:
        self.tokenizer, self.replies = tokenizer, replies
        self.running: dict[str, tuple[list[int], list[int], int]] = {}
        self.aborted: list[str] = []
        self.steps = 0

    def add_request(self, request_id: str, prompt: dict, params: dict) -> None:
        name = re.search(r"Q\d+", self.tokenizer.decode(prompt["prompt_token_ids"])).group(0)
        reply = self.tokenizer.encode(self.replies[name], add_special_tokens=False) + [self.tokenizer.eos_token_id]
        self.running[request_id] = (reply, [], params["max_tokens"])

    def step(self) -> list[Any]:
        from types import SimpleNamespace

        time.sleep(0.005)
        self.steps += 1
        outs = []
        for request_id, (reply, ids, budget) in list(self.running.items()):
            ids.append(reply[len(ids)])
            finished = len(ids) >= min(budget, len(reply))
            completion = SimpleNamespace(token_ids=list(ids), logprobs=None)
            outs.append(SimpleNamespace(request_id=request_id, finished=finished, outputs=[completion]))
            if finished:
                del self.running[request_id]
        return outs

    def abort_request(self, ids: list[str]) -> None:
        self.aborted += ids
        for request_id in ids:
            self.running.pop(request_id, None)


def test_the_vllm_request_server_streams_and_aborts_at_a_stop_string(kit) -> None:
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from verl.workers.rollout.vllm_request_server import VLLMRequestServer

    tok = kit.chat_tokenizer()
    engine = VLLMStandIn(tok, {"Q1": "The answer is 408 and that is all"})
    config = OmegaConf.create({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "response_length": 64})
    params = lambda settings, eos: {"max_tokens": settings.response_length}  # noqa: E731
    rollout = SimpleNamespace(llm=SimpleNamespace(llm_engine=engine), config=config, tokenizer=tok, _model_eos=None,
                              sampling_params=params)  # fmt: skip

    async def main() -> None:
        trajectory = Trajectory(tok, lambda prompts: None)
        trajectory.server.close()
        trajectory.server = trajectory.endpoint.server = VLLMRequestServer(rollout, {"eos_token_id": tok.eos_token_id})
        async with trajectory as t:
            stream = await t.client.chat.completions.create(
                model="policy", messages=_user("Q1"), stream=True, stop=["is 4"]
            )
            pieces = [chunk.choices[0].delta.content or "" async for chunk in stream]
            assert "".join(pieces) == "The answer " and len([p for p in pieces if p]) > 1, pieces
            assert len(engine.aborted) == 1 and engine.steps == len("The answer is 4")  # aborted at the stop string
            assert t.recorder.current.pending[0].ids == tok.encode("The answer is 4", add_special_tokens=False)

    asyncio.run(main())


def test_the_trajectory_ending_mid_stream_cancels_the_request_without_blaming_the_client(kit) -> None:
    """The loop closes the endpoint (its agent timed out) while an answer streams: the request is cancelled, and the
    failure stays the loop's own (no ``stream_closed``)."""
    tok = kit.chat_tokenizer()
    engine = StepEngine(tok, {"Q1": "y" * 200}, step_s=0.01)

    async def main() -> None:
        async with Trajectory(tok, engine) as t:
            started = asyncio.Event()

            async def agent() -> None:
                stream = await t.client.chat.completions.create(model="policy", messages=_user("Q1"), stream=True)
                async for chunk in stream:
                    if chunk.choices[0].delta.content:
                        started.set()

            task = asyncio.create_task(agent())
            await asyncio.wait_for(started.wait(), 10)
            t.endpoint.closed = True  # what the loop does when its agent is done or timed out
            await t.http.close()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            for _ in range(100):
                if t.server.running == 0:
                    break
                await asyncio.sleep(0.02)
            assert t.server.running == 0 and engine.steps < 100 and t.endpoint.failure is None

    asyncio.run(main())
