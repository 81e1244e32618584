"""When the first token reaches an agent through the rollout's OpenAI endpoint: ``stream: true`` (token by token,
through the request server's per-token callback) against a plain answer, on the ``hf`` engine.

One trajectory endpoint over the ``hf`` rollout's request server (its decode loop's per-step hook), a random tiny
model (byte tokenizer, so sampled bytes make partial UTF-8 characters), ``ignore_eos`` so every answer is
``--tokens`` long. Each round asks once plainly and once streamed (a plain ``httpx`` client in the same process, as
a callable agent is); reported: median seconds to the first content chunk, to the whole answer, and the content
chunks per answer. The streamed text is checked equal to the concatenated chunks and the recorded ids to the
engine's ``--tokens`` ids.

    python bench/endpoint_stream.py --smoke
    python bench/endpoint_stream.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from bench._common import markdown_table, save_result  # noqa: E402
from verl.experimental.agent_loop.openai_agent.endpoint import TrajectoryEndpoint  # noqa: E402
from verl.experimental.agent_loop.openai_agent.http import LoopbackServer  # noqa: E402
from verl.experimental.agent_loop.openai_agent.trajectory import TrajectoryRecorder  # noqa: E402
from verl.experimental.agent_loop.tool_parser import ToolParser  # noqa: E402
from verl.models.tiny import make_byte_tokenizer, make_tiny_causal_lm  # noqa: E402
from verl.workers.rollout.hf_rollout import HFRollout  # noqa: E402


async def ask(server: Any, tok: Any, tokens: int, stream: bool) -> tuple[float | None, float, int]:
    """``(seconds to the first content chunk, seconds to the end, content chunks)`` of one request."""
    recorder = TrajectoryRecorder(tok, tok.eos_token_id, 512, 4096)
    parser = ToolParser.get_tool_parser("hermes", tok)
    endpoint = TrajectoryEndpoint(server, tok, parser, recorder, "key", "policy", 4, True)
    http = LoopbackServer(endpoint)
    url = f"http://127.0.0.1:{await http.start()}/v1/completions"
    body = {"prompt": "hello", "max_tokens": tokens, "stream": stream}
    first, chunks, text = None, 0, ""
    try:
        async with httpx.AsyncClient(headers={"Authorization": "Bearer key"}, timeout=600) as client:
            start = time.perf_counter()
            if stream:
                async with client.stream("POST", url, json=body) as r:
                    async for line in r.aiter_lines():
                        if line.startswith("data: {"):
                            piece = json.loads(line[6:])["choices"][0]["text"]
                            if piece:
                                chunks += 1
                                first = first or time.perf_counter() - start
                                text += piece
            else:
                text = (await client.post(url, json=body)).json()["choices"][0]["text"]
            total = time.perf_counter() - start
    finally:
        await http.close()
    (choice,) = recorder.current.pending
    if len(choice.ids) != tokens or text != tok.decode(choice.ids, skip_special_tokens=True):
        raise SystemExit(f"stream={stream}: the answer is not the recorded {tokens} ids")
    return first, total, chunks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128, help="tokens per answer")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="32 tokens, 1 round")
    args = parser.parse_args()
    if args.smoke:
        args.tokens, args.rounds = 32, 1
    torch.set_num_threads(1)
    tok = make_byte_tokenizer()
    config = OmegaConf.create({"name": "hf", "temperature": 1.0, "top_p": 1.0, "top_k": -1, "do_sample": True,
                               "prompt_length": 64, "response_length": args.tokens, "min_new_tokens": 0,
                               "dtype": "float32", "max_num_seqs": 8, "calculate_log_probs": True, "seed": 0,
                               "ignore_eos": True})  # fmt: skip
    rollout = HFRollout(make_tiny_causal_lm(seed=0), config, tokenizer=tok)
    server = rollout.request_server({"eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id})
    runs: dict[str, list[tuple[float | None, float, int]]] = {"plain": [], "stream": []}
    try:
        for round_ in range(args.rounds + 1):  # round 0 warms up
            for side in runs:
                result = asyncio.run(ask(server, tok, args.tokens, side == "stream"))
                if round_:
                    runs[side].append(result)
    finally:
        server.close()
    header = ["answer", "s to first content chunk", "s to whole answer", "content chunks"]
    table = []
    for side, results in runs.items():
        firsts = [f for f, _, _ in results if f is not None]
        table.append([
            side, statistics.median(firsts) if firsts else "-", statistics.median(t for _, t, _ in results),
            statistics.median(c for _, _, c in results),
        ])  # fmt: skip
    print(f"{args.tokens} tokens per answer, median of {args.rounds} rounds, hf engine, tiny random model, CPU")
    print(markdown_table(header, table))
    path = save_result(
        "endpoint_stream",
        {"tokens": args.tokens, "rounds": args.rounds, "runs": runs, "table": [dict(zip(header, r)) for r in table]},
        smoke=args.smoke,
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
