"""Agent-loop turns on vLLM: the batch-by-batch ``BatchingRequestServer`` (formerly ``RequestBatcher``) against the
request-by-request ``VLLMRequestServer``.

Both sides serve the same trajectories on the same vLLM engine: ``--trajectories`` coroutines, each running
``--turns`` turns of "generate up to B tokens after the conversation so far, then wait for a tool for L seconds",
with each turn's budget B (``--min-tokens``..``--max-tokens``) and tool latency L (0..``--max-tool-s``) drawn from
one seed, so both sides ask for exactly the same work. Greedy, with an EOS the model does not reach, so every turn
generates its whole budget on both sides. The batcher runs the waiting requests as one ``generate`` call (the
largest budget for all, each cut to its own) and takes the next batch when the call ends; the server adds each
request to vLLM's running batch as it arrives and answers it when it finishes.

Each side runs ``--rounds`` times in turn (order flipped each round) after a warm-up; reported: the median wall time
of a batch of trajectories per side and the median of the rounds' ratios ``server / batcher``.

    python bench/agent_turns_vllm.py --smoke
    python bench/agent_turns_vllm.py
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import markdown_table, save_result  # noqa: E402


def make_engine(args: argparse.Namespace):
    """A vLLMRollout over a random Qwen2 (hidden 256, 4 layers; ``--smoke``: hidden 128, 2 layers)."""
    from omegaconf import OmegaConf

    from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm
    from verl.workers.rollout.vllm_rollout import vLLMRollout

    hidden, layers = (128, 2) if args.smoke else (256, 4)
    spec = TinyModelSpec(arch="qwen2", hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=4 * hidden, tie_word_embeddings=True)  # fmt: skip
    path = tempfile.mkdtemp(prefix="verl_bench_turns_")
    make_tiny_causal_lm(spec, save_dir=path, seed=0)
    length = args.prompt_tokens + args.turns * (args.max_tokens + args.tool_reply_tokens)
    cfg = OmegaConf.create(
        dict(name="vllm", temperature=1.0, top_p=1.0, top_k=-1, do_sample=False, prompt_length=length,
             response_length=args.max_tokens, min_new_tokens=0, dtype="float32", max_num_seqs=args.trajectories,
             calculate_log_probs=False, enforce_eager=True, free_cache_engine=False, seed=0,
             val_kwargs=dict(do_sample=False, temperature=0.0, top_p=1.0, top_k=-1, n=1))
    )  # fmt: skip
    return vLLMRollout(path, cfg), spec


def plan(args: argparse.Namespace, vocab: int) -> list[list[tuple[int, float, list[int]]]]:
    """Per trajectory, per turn: (token budget, tool latency in s, the tool reply's ids). Fixed by ``--seed``."""
    rng = random.Random(args.seed)
    return [
        [
            (
                rng.randint(args.min_tokens, args.max_tokens),
                rng.uniform(0.0, args.max_tool_s),
                [rng.randrange(3, vocab - 3) for _ in range(args.tool_reply_tokens)],
            )
            for _ in range(args.turns)
        ]  # fmt: skip
        for _ in range(args.trajectories)
    ]


async def run_trajectories(server, prompts: list[list[int]], turns) -> int:
    """Every trajectory's turns through ``server``; returns the tokens generated."""

    async def one(prompt: list[int], steps) -> int:
        ids, made = list(prompt), 0
        try:
            for budget, latency, reply in steps:
                out = await server.generate(ids, budget)
                ids += out.token_ids
                made += len(out.token_ids)
                await asyncio.sleep(latency)  # the tool
                ids += reply
        finally:
            server.close_trajectory()
        return made

    for _ in prompts:
        server.open_trajectory()
    return sum(await asyncio.gather(*(one(p, s) for p, s in zip(prompts, turns))))


def one_run(side: str, engine, meta, prompts, turns) -> tuple[float, int]:
    from verl.workers.rollout.request_server import BatchingRequestServer

    if side == "batcher":
        server = BatchingRequestServer(engine.generate_sequences, meta)
    else:
        server = engine.request_server(meta)
    start = time.perf_counter()
    try:
        tokens = asyncio.run(run_trajectories(server, prompts, turns))
    finally:
        server.close()
    return time.perf_counter() - start, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectories", type=int, default=16)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--min-tokens", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--tool-reply-tokens", type=int, default=8)
    parser.add_argument("--max-tool-s", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="4 trajectories, 2 turns, tiny model, 1 round")
    args = parser.parse_args()
    if args.smoke:
        args.trajectories, args.turns, args.max_tokens, args.min_tokens = 4, 2, 8, 2
        args.max_tool_s, args.rounds = 0.05, 1
    engine, spec = make_engine(args)
    rng = random.Random(args.seed + 1)
    prompts = [
        [rng.randrange(3, spec.vocab_size - 3) for _ in range(args.prompt_tokens)] for _ in range(args.trajectories)
    ]
    turns = plan(args, spec.vocab_size)
    # greedy, stopping only at an id outside the sampled range's reach (pad): every turn runs its whole budget
    meta = {"validate": True, "eos_token_id": [spec.vocab_size - 1], "pad_token_id": 0}
    try:
        for side in ("batcher", "server"):  # warm-up
            one_run(side, engine, meta, prompts[:2], [t[:1] for t in turns[:2]])
        times: dict[str, list[float]] = {"batcher": [], "server": []}
        tokens: dict[str, int] = {}
        ratios = []
        for r in range(args.rounds):
            order = ("batcher", "server") if r % 2 == 0 else ("server", "batcher")
            for side in order:
                wall, made = one_run(side, engine, meta, prompts, turns)
                times[side].append(wall)
                tokens[side] = made
            ratios.append(times["server"][-1] / times["batcher"][-1])
    finally:
        engine.shutdown()
    tool_s = [sum(lat for _, lat, _ in t) for t in turns]
    rows = [
        [side, statistics.median(times[side]), tokens[side], tokens[side] / statistics.median(times[side])]
        for side in ("batcher", "server")
    ]
    print(markdown_table(["turn server", "wall s (median)", "tokens generated", "tokens/s"], rows))
    ratio = statistics.median(ratios)
    print(f"server / batcher wall time: {ratio:.3f} (rounds: {', '.join(f'{x:.3f}' for x in ratios)}); "
          f"the slowest trajectory's tool time alone: {max(tool_s):.2f} s")  # fmt: skip
    save_result(
        "agent_turns_vllm",
        {
            "args": vars(args),
            "times": times,
            "tokens": tokens,
            "ratios": ratios,
            "ratio_median": ratio,
            "max_trajectory_tool_s": max(tool_s),
        },  # fmt: skip
        smoke=args.smoke,
    )


if __name__ == "__main__":
    main()
