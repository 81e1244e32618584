"""Profiler tables of the GPU hot spots, as text, for sessions that optimise without a GPU.

Three ``torch.profiler`` views at one shape (default Qwen2.5-0.5B's, random weights, bf16 autocast):

1. **One decode step** of the hf engine's static-cache loop (verl/workers/rollout/decode/, 128 rows after 64-token
   prompts) in ``eager`` and ``cuda_graph`` mode. A decode step is isolated by difference: the loop is profiled
   generating ``--short`` and ``--long`` tokens (after a warm-up of both, so no capture or compilation is inside),
   and each kernel's calls and time are ``(long - short) / (long - short tokens)``: per step, prefill excluded.
2. **One actor update** (``dp_actor.update_policy``: the default config has one mini-batch of one micro-batch of
   all 128 sequences: forward, backward, optimizer step) on the product path of ``main_ppo`` (bench/_sides.py's
   ``VerlSide``), profiled on the second step (the first is the warm-up: graph capture, the MFU peak measurement).
3. The **old-log-prob pass** (``dp_actor.compute_log_prob``) of the same step.

Each view lists the top 30 kernels by GPU time (name, calls, total and mean microseconds, share), the kernel count,
the total kernel time, the wall time and the process's CPU time, then torch's own operator table (top 30 by device
time). Written to ``--out``/profile.txt (and profile.json with the numbers). On a machine without CUDA the same runs
(tiny shape with ``--smoke``) with CPU operator tables, to prove the script.

    python bench/gpu_kit/profile_step.py --shape 0.5B --tokenizer .gpu_kit/tokenizer --out /tmp/prof
    python bench/gpu_kit/profile_step.py --smoke --tokenizer .gpu_kit/tokenizer --out /tmp/prof
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

TOP = 30


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class Capture:
    """A profiled block: wall and CPU seconds, and per kernel name its calls and GPU microseconds."""

    def __init__(self) -> None:
        self.kernels: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        self.wall_s = self.cpu_s = 0.0
        self.prof: profile | None = None

    def __enter__(self) -> Capture:
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        self.prof = profile(activities=activities)
        _sync()
        self.prof.__enter__()
        self._t0, self._c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        _sync()
        self.wall_s, self.cpu_s = time.perf_counter() - self._t0, time.process_time() - self._c0
        self.prof.__exit__(*exc)
        for event in self.prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                entry = self.kernels[event.name]
                entry[0] += 1
                entry[1] += event.time_range.elapsed_us()

    def op_table(self) -> str:
        key = "device_time_total" if torch.cuda.is_available() else "cpu_time_total"
        try:
            return self.prof.key_averages().table(sort_by=key, row_limit=TOP, max_name_column_width=90)
        except Exception as err:  # an older torch names the key cuda_time_total
            return f"(operator table unavailable: {err})"


def kernel_table(
    kernels: dict[str, list[float]], per: float, title: str, wall_s: float, cpu_s: float
) -> tuple[str, dict]:
    """Top kernels by time, each count and time divided by ``per`` (steps), and the totals."""
    total_us = sum(v[1] for v in kernels.values()) / per
    count = sum(v[0] for v in kernels.values()) / per
    lines = [
        f"### {title}",
        f"kernels: {count:.1f} launches, {len(kernels)} distinct; GPU kernel time {total_us / 1e3:.3f} ms; "
        f"wall {wall_s * 1e3:.3f} ms; process CPU {cpu_s * 1e3:.3f} ms" + (" (per step)" if per != 1 else ""),
        "",
        f"{'calls':>8} {'total us':>10} {'mean us':>8} {'share':>6}  kernel",
    ]
    ranked = sorted(kernels.items(), key=lambda kv: -kv[1][1])
    for name, (calls, us) in ranked[:TOP]:
        share = us / per / total_us if total_us else 0.0
        lines.append(f"{calls / per:>8.1f} {us / per:>10.1f} {us / max(calls, 1):>8.1f} {share:>6.1%}  {name[:160]}")
    numbers = {"launches": count, "distinct": len(kernels), "gpu_ms": total_us / 1e3, "wall_ms": wall_s * 1e3,
               "cpu_ms": cpu_s * 1e3, "top": [[n, c / per, us / per] for n, (c, us) in ranked[:TOP]]}  # fmt: skip
    return "\n".join(lines), numbers


def profile_decode(shape: str, rows: int, prompt: int, short: int, long: int) -> tuple[list[str], dict]:
    """Per-step kernel tables of the decode loop in each mode this device has."""
    from bench.decode_speed import build_model
    from verl.hardware.precision import resolve_dtype
    from verl.workers.rollout.base import SamplingSettings
    from verl.workers.rollout.decode import DecodeLoop

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = resolve_dtype("auto", torch.device(device))
    model = build_model(shape, device)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (rows, prompt), generator=gen).to(device)
    mask, pos = torch.ones_like(ids), torch.arange(prompt, device=device).expand_as(ids)
    texts, numbers = [], {}
    for mode in ["eager"] + (["cuda_graph"] if device == "cuda" else []):
        loop = DecodeLoop(model, mode=mode)

        def generate(n: int, loop=loop) -> None:
            settings = SamplingSettings(do_sample=True, temperature=1.0, top_p=1.0, top_k=-1, response_length=n,
                                        min_new_tokens=n, calculate_log_probs=False)  # fmt: skip
            torch.manual_seed(1)
            with torch.autocast(device, dtype=dtype, enabled=dtype != torch.float32):
                loop.generate(ids, mask, pos, settings, eos_ids=[], pad_id=0)

        for n in (short, long):  # warm-up: capture / compile for both lengths outside the profile
            generate(n)
        caps = {}
        for n in (short, long):
            with Capture() as cap:
                generate(n)
            caps[n] = cap
        steps = long - short
        kernels = {}
        for name in set(caps[long].kernels) | set(caps[short].kernels):
            a, b = caps[long].kernels.get(name, [0, 0.0]), caps[short].kernels.get(name, [0, 0.0])
            if a[0] - b[0] > 0 or a[1] - b[1] > 0:
                kernels[name] = [a[0] - b[0], max(0.0, a[1] - b[1])]
        wall = (caps[long].wall_s - caps[short].wall_s) / steps
        cpu = (caps[long].cpu_s - caps[short].cpu_s) / steps
        text, num = kernel_table(kernels, steps, f"decode step, {shape}, {rows} rows, mode {mode} ({loop.mode})",
                                 wall, cpu)  # fmt: skip
        texts += [text, "", f"operators of the {long}-token call (prefill included):", caps[long].op_table(), ""]
        numbers[f"decode_{mode}"] = num
        print(text.splitlines()[1], flush=True)
    del model
    return texts, numbers


def profile_update(
    shape: str, tokenizer: str | None, batch: int, group: int, prompt: int, response: int
) -> tuple[list[str], dict]:
    """Kernel tables of the actor's update and old-log-prob pass on the second GRPO step of the product path."""
    from bench._sides import VerlSide
    from bench.gpu_grpo_vs_trl import _work

    root = os.path.join(tempfile.gettempdir(), "verl_bench_qwen_shapes")
    args = dict(shape=shape, side="verl", batch=batch, group=group, prompt_length=prompt, response_length=response,
                root=root, tokenizer=tokenizer, verl_overrides=[])  # fmt: skip
    side = VerlSide(_work(args))
    side.step()  # warm-up
    worker = side.trainer.actor_rollout_wg.workers[0]  # local backend: one rank; colocated roles in worker_dict
    roles = [w for w in getattr(worker, "worker_dict", {}).values() if getattr(w, "actor", None) is not None]
    actor = (roles[0] if roles else worker).actor
    caps: dict[str, Capture] = {}

    def wrap(name: str, fn):
        def profiled(*a, **k):
            with Capture() as cap:
                out = fn(*a, **k)
            caps[name] = cap
            return out

        return profiled

    actor.update_policy = wrap("update_policy", actor.update_policy)
    actor.compute_log_prob = wrap("compute_log_prob", actor.compute_log_prob)
    side.step()
    texts, numbers = [], {}
    for name, cap in caps.items():
        title = f"actor {name}, {shape}, {batch * group} sequences x {prompt}+{response} tokens (one micro-batch)"
        text, num = kernel_table(cap.kernels, 1, title, cap.wall_s, cap.cpu_s)
        texts += [text, "", f"operators of {name}:", cap.op_table(), ""]
        numbers[name] = num
        print(text.splitlines()[1], flush=True)
    return texts, numbers


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="0.5B")
    parser.add_argument("--tokenizer", default=None, help="a saved tokenizer folder (default: the bundled one)")
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--prompt-length", type=int, default=64)
    parser.add_argument("--short", type=int, default=8, help="tokens of the shorter decode call")
    parser.add_argument("--long", type=int, default=24, help="tokens of the longer decode call")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--response-length", type=int, default=256)
    parser.add_argument("--skip", nargs="*", default=[], choices=["decode", "update"])
    parser.add_argument("--out", default=".")
    parser.add_argument("--smoke", action="store_true", help="tiny shape, 4 rows, few tokens")
    args = parser.parse_args(argv)
    if args.smoke:
        args.shape, args.rows, args.prompt_length, args.short, args.long = "tiny", 4, 8, 2, 4
        args.batch, args.group, args.response_length = 2, 2, 8
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU (no CUDA: CPU operators only)"
    texts = [f"# Profile of {args.shape} on {device}, torch {torch.__version__}", ""]
    numbers: dict = {"shape": args.shape, "device": device}
    parts = {
        "decode": lambda: profile_decode(args.shape, args.rows, args.prompt_length, args.short, args.long),
        "update": lambda: profile_update(
            args.shape, args.tokenizer, args.batch, args.group, args.prompt_length, args.response_length
        ),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    failed = []
    for name, part in parts.items():
        if name in args.skip:
            continue
        try:
            t, n = part()
        except Exception:  # one part's failure must not lose the other's tables
            failed.append(name)
            t, n = [f"### {name}: FAILED", traceback.format_exc()], {}
            print(t[1], file=sys.stderr, flush=True)
        texts, numbers = texts + t, {**numbers, **n}
        (out / "profile.txt").write_text("\n".join(texts) + "\n")
        (out / "profile.json").write_text(json.dumps(numbers, indent=1) + "\n")
    print(f"written: {out / 'profile.txt'}")
    if failed:
        sys.exit(f"profile parts that failed: {failed}")


if __name__ == "__main__":
    main()
