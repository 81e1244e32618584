"""Rollout plus judge reward: judging after the agent loops end against judging each trajectory as its loop ends.

Both sides run the same batch through the same agent loops on the ``hf`` engine (a random tiny Qwen2, byte
tokenizer): every trajectory generates a turn, waits for a "tool" (0 to ``--max-tool-s`` seconds, drawn from one
seed), generates a second turn and ends. The reward is a pointwise LLM judge behind an OpenAI-compatible endpoint
on 127.0.0.1 that answers ``Rating: [[7]]`` after ``--judge-s`` seconds per request; the client sends at most
``--max-concurrency`` requests at a time on both sides. Timed: the rollout and the ``judge`` reward manager's call
on its output, together.

- after: the runner without a judge, then the reward manager asks the judge for every row;
- overlap: ``reward_model.judge.overlap_rollout`` (``JudgeOverlap``): each row is judged as soon as its loop ends,
  and the reward manager parses those answers.

The sides alternate for ``--rounds`` rounds after a warm-up; reported: median wall seconds per side and the median
of the rounds' ratios ``overlap / after``. Both sides' rewards are checked equal.

    python bench/judge_overlap.py --smoke
    python bench/judge_overlap.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import markdown_table, save_result  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register  # noqa: E402

TOOL_DELAYS: dict[str, float] = {}  # prompt text -> this trajectory's tool seconds


@register("bench_tool_wait")
class ToolWaitLoop(AgentLoopBase):
    """Generate, wait for a tool (its delay looked up by the prompt), generate again."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        prompt_ids = list(kwargs["prompt_ids"])
        half = max(self.settings.response_length // 2, 1)
        first = await self.server.generate(prompt_ids, half)
        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=True)
        await asyncio.sleep(TOOL_DELAYS.get(text, 0.0))
        second = await self.server.generate(prompt_ids + first.token_ids, half)
        ids = first.token_ids + second.token_ids
        return AgentLoopOutput(prompt_ids, ids, [1] * len(ids), num_turns=3)


def start_judge(delay_s: float) -> tuple[ThreadingHTTPServer, str]:
    """A scripted judge: every request is answered ``Rating: [[7]]`` after ``delay_s`` seconds."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            time.sleep(delay_s)
            payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": "Rating: [[7]]"}}]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload.encode())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


def build(args: argparse.Namespace):
    """The engine, the prompt batch and the runner factory."""
    import numpy as np
    from omegaconf import OmegaConf

    from verl.base_config import omega_conf_to_dataclass
    from verl.models.tiny import TinyModelSpec, make_byte_tokenizer, make_tiny_causal_lm
    from verl.trainer.config import load_config
    from verl.workers.config import RolloutConfig
    from verl.workers.rollout.hf_rollout import HFRollout

    tok = make_byte_tokenizer()
    model = make_tiny_causal_lm(TinyModelSpec(arch="qwen2", hidden_size=64, num_hidden_layers=2), seed=0).eval()
    rollout = OmegaConf.create(OmegaConf.to_container(load_config([]).actor_rollout_ref.rollout, resolve=True))
    overrides = {"name": "hf", "prompt_length": 32, "response_length": args.response_length, "dtype": "float32",
                 "multi_turn.enable": True, "agent.default_agent_loop": "bench_tool_wait",
                 "agent.num_workers": 2, "calculate_log_probs": False}  # fmt: skip
    for key, value in overrides.items():
        OmegaConf.update(rollout, key, value)
    engine = HFRollout(model, rollout, tok)
    rng = random.Random(args.seed)
    texts = [f"question {i}: " + "x" * rng.randint(1, 8) for i in range(args.rows)]
    for text in texts:
        TOOL_DELAYS[text] = rng.uniform(0.0, args.max_tool_s)
    from verl.api.data import encode_prompts

    prompts = encode_prompts(texts, tok, apply_chat_template=False)
    prompts.meta_info.update(eos_token_id=[tok.eos_token_id], pad_token_id=tok.pad_token_id, validate=True)
    truths = np.empty(len(texts), dtype=object)
    truths[:] = [{"ground_truth": ""} for _ in texts]
    prompts.non_tensor_batch["reward_model"] = truths
    section = omega_conf_to_dataclass(rollout, RolloutConfig)
    return tok, engine, prompts, section


def one_run(side: str, args, tok, engine, prompts, section, judge_cfg) -> tuple[float, list[float]]:
    import numpy as np

    from verl.experimental.agent_loop.judge_overlap import JudgeOverlap
    from verl.experimental.agent_loop.runner import AgentLoopRunner
    from verl.workers.reward_manager import JudgeRewardManager

    judge = JudgeOverlap.from_config(judge_cfg) if side == "overlap" else None
    runner = AgentLoopRunner(section, tok, engine.generate_sequences, judge=judge)
    manager = JudgeRewardManager(tok, 0, judge_config=judge_cfg, num_workers=0)
    start = time.perf_counter()
    out = runner.generate_sequences(prompts)
    out.non_tensor_batch["reward_model"] = prompts.non_tensor_batch["reward_model"]
    out.non_tensor_batch["data_source"] = np.array(["chat"] * len(prompts), dtype=object)
    rewards = manager(out, return_dict=True)["reward_tensor"].sum(-1).tolist()
    wall = time.perf_counter() - start
    if side == "overlap" and manager.reused_batches != 1:
        raise RuntimeError("the overlap side asked the judge again: its answers were not reused")
    return wall, rewards


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--response-length", type=int, default=16)
    parser.add_argument("--max-tool-s", type=float, default=1.0)
    parser.add_argument("--judge-s", type=float, default=0.3)
    parser.add_argument("--max-concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="4 rows, short waits, 1 round")
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.max_tool_s, args.judge_s, args.rounds = 4, 0.1, 0.05, 1
    server, url = start_judge(args.judge_s)
    judge_cfg = {"url": url, "max_concurrency": args.max_concurrency, "max_retries": 0, "timeout_s": 30.0}
    tok, engine, prompts, section = build(args)
    try:
        for side in ("after", "overlap"):  # warm-up
            one_run(side, args, tok, engine, prompts, section, judge_cfg)
        times: dict[str, list[float]] = {"after": [], "overlap": []}
        ratios, rewards = [], {}
        for r in range(args.rounds):
            for side in ("after", "overlap") if r % 2 == 0 else ("overlap", "after"):
                wall, rewards[side] = one_run(side, args, tok, engine, prompts, section, judge_cfg)
                times[side].append(wall)
            ratios.append(times["overlap"][-1] / times["after"][-1])
    finally:
        server.shutdown()
    if rewards["after"] != rewards["overlap"]:
        raise RuntimeError(f"the two sides' rewards differ: {rewards}")
    rows = [[side, statistics.median(times[side])] for side in ("after", "overlap")]
    print(markdown_table(["judge", "rollout + reward wall s (median)"], rows))
    ratio = statistics.median(ratios)
    tools = sorted(TOOL_DELAYS.values())
    print(f"overlap / after: {ratio:.3f} (rounds: {', '.join(f'{x:.3f}' for x in ratios)}); longest tool wait "
          f"{tools[-1]:.2f} s; judge {args.judge_s} s per request, {args.max_concurrency} at a time")  # fmt: skip
    save_result(
        "judge_overlap",
        {"args": vars(args), "times": times, "ratios": ratios, "ratio_median": ratio, "rewards": rewards["after"]},
        smoke=args.smoke,
    )


if __name__ == "__main__":
    main()
