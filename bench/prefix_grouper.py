"""``actor.use_prefix_grouper``: the actor's log-prob pass + one update, plain vs prompt-grouped, side by side.

GRPO rows share their group's prompt. With a long prompt and short responses most of the plain forward is the
prompt, repeated ``n`` times; the grouped forward (:mod:`verl.workers.actor.prefix_grouping`) runs it once per
group. Each side builds the same random Qwen2-shaped model and batch (``--groups`` prompts of ``--prompt-len``
tokens, ``--n`` responses of ``--response-len`` tokens each, left/right padding as the driver's batches have it),
then times ``DataParallelPPOActor.compute_log_prob`` + ``update_policy`` (one mini-batch, one micro-batch per
group). The sides alternate, each round in fresh subprocesses, best time of ``--rounds``; peak memory is the
growth of the process's peak RSS above the built model and batch on CPU (VmHWM reset after setup), or
``torch.cuda.max_memory_allocated`` on CUDA. The log-probs of both sides are compared in the parent.

    python bench/prefix_grouper.py                       # 2 groups, prompt 512, n=8, responses 32, 3 rounds
    python bench/prefix_grouper.py --smoke               # tiny and fast
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import verl.trainer.config.experiment_name  # noqa: E402, F401  (registers the YAML's ${verl.*} resolvers)
from bench._common import markdown_table, save_result  # noqa: E402
from verl.models.tiny import TinyModelSpec, make_tiny_causal_lm  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.workers.actor.dp_actor import DataParallelPPOActor  # noqa: E402

YAML = Path(__file__).resolve().parents[1] / "verl" / "trainer" / "config" / "ppo_trainer.yaml"


def _spec(args: argparse.Namespace) -> TinyModelSpec:
    return TinyModelSpec(
        arch="qwen2",
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.hidden // 64,
        num_key_value_heads=max(1, args.hidden // 256),
        intermediate_size=args.hidden * 11 // 4,
        max_position_embeddings=args.prompt_len + args.response_len + 8,
        vocab_size=args.vocab,
    )


def _batch(args: argparse.Namespace) -> DataProto:
    """``groups * n`` rows: each group's prompt (a few left pads) and ``n`` responses of 1/2..1 of the length."""
    gen = torch.Generator().manual_seed(0)
    p_len, r_len, n = args.prompt_len, args.response_len, args.n
    bs = args.groups * n
    ids = torch.zeros(bs, p_len + r_len, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for g in range(args.groups):
        valid = p_len - 3 * g
        prompt = torch.randint(0, args.vocab, (valid,), generator=gen)
        for k in range(n):
            row, resp = g * n + k, r_len - (k * r_len) // (2 * n)
            ids[row, p_len - valid : p_len] = prompt
            ids[row, p_len : p_len + resp] = torch.randint(0, args.vocab, (resp,), generator=gen)
            mask[row, p_len - valid : p_len + resp] = 1
    tensors = {
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
        "responses": ids[:, p_len:].clone(),
        "response_mask": mask[:, p_len:].clone(),
        "advantages": torch.randn(bs, r_len, generator=gen),
    }
    meta = {"temperature": 1.0, "global_steps": 1, "micro_batch_size": n}
    return DataProto.from_dict(tensors=tensors, meta_info=meta)


def _actor(args: argparse.Namespace, grouped: bool, device: str) -> tuple[DataParallelPPOActor, DataProto]:
    cfg = OmegaConf.load(YAML)
    OmegaConf.resolve(cfg)
    actor_cfg = cfg.actor_rollout_ref.actor
    actor_cfg.update(
        dtype=args.dtype,
        use_prefix_grouper=grouped,
        ppo_mini_batch_size=args.groups * args.n,
        ppo_micro_batch_size_per_gpu=args.n,
    )
    model = make_tiny_causal_lm(_spec(args))
    model.set_attn_implementation("sdpa")
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    return DataParallelPPOActor(actor_cfg, model, opt), _batch(args)


def _peak_mib(device: str) -> float:
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmHWM in /proc/self/status")


def _reset_peak(device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated() / 2**20
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current RSS
    return _peak_mib(device)


def run_side(args: argparse.Namespace, grouped: bool) -> dict:
    """One side in this process: setup, one warm-up step, then one timed step; returns time, peak and log-probs."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    actor, data = _actor(args, grouped, args.device)

    def step() -> torch.Tensor:
        lp, _ = actor.compute_log_prob(data)
        data.batch["old_log_probs"] = lp
        actor.update_policy(data)
        return lp

    step()  # warm-up (allocator, optimizer state)
    base = _reset_peak(args.device)
    start = time.perf_counter()
    lp = step()
    if args.device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "peak_mib": _peak_mib(args.device) - base, "log_probs": lp.cpu().tolist()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=512)
    parser.add_argument("--response-len", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, one round")
    parser.add_argument("--side", choices=["plain", "grouped"], help=argparse.SUPPRESS)  # internal: one subprocess
    args = parser.parse_args(argv)
    if args.smoke:
        args.groups, args.n, args.prompt_len, args.response_len = 2, 3, 32, 8
        args.hidden, args.layers, args.vocab, args.rounds = 64, 2, 512, 1
    if args.side is not None:
        print(json.dumps(run_side(args, args.side == "grouped")))
        return
    forwarded = list(argv if argv is not None else sys.argv[1:])  # a side applies --smoke itself
    runs: dict[str, list[dict]] = {"plain": [], "grouped": []}
    for _ in range(args.rounds):
        for side in ("plain", "grouped"):
            cmd = [sys.executable, __file__, *forwarded, "--side", side]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"{side} side failed ({' '.join(cmd)}):\n{proc.stderr[-4000:]}")
            runs[side].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    best = {side: min(r["seconds"] for r in rs) for side, rs in runs.items()}
    peak = {side: min(r["peak_mib"] for r in rs) for side, rs in runs.items()}
    batch = _batch(args).batch
    diff = torch.tensor(runs["plain"][0]["log_probs"]) - torch.tensor(runs["grouped"][0]["log_probs"])
    diff = diff[batch["response_mask"].bool()]
    plain_tokens = int(batch["attention_mask"].sum())
    prompts = sum(int(batch["attention_mask"][g * args.n, : args.prompt_len].sum()) for g in range(args.groups))
    grouped_tokens = plain_tokens - (args.n - 1) * prompts
    rows = [
        ["plain", plain_tokens, best["plain"], peak["plain"]],
        ["grouped", grouped_tokens, best["grouped"], peak["grouped"]],
        ["grouped / plain", grouped_tokens / plain_tokens, best["grouped"] / best["plain"]]
        + [peak["grouped"] / peak["plain"]],
    ]
    print(markdown_table(["side", "tokens through the model", "s (log-prob + update)", "peak MiB"], rows))
    print(f"max |log-prob difference| {float(diff.abs().max()):.2e}")
    payload = {
        "args": {k: v for k, v in vars(args).items() if k != "side"},
        "seconds": {s: [r["seconds"] for r in rs] for s, rs in runs.items()},
        "peak_mib": {s: [r["peak_mib"] for r in rs] for s, rs in runs.items()},
        "tokens": {"plain": plain_tokens, "grouped": grouped_tokens},
        "ratio_time": best["grouped"] / best["plain"],
        "ratio_peak": peak["grouped"] / peak["plain"],
        "max_abs_logprob_diff": float(diff.abs().max()),
    }
    print(save_result("prefix_grouper", payload, smoke=args.smoke, per_machine=True))


if __name__ == "__main__":
    main()
