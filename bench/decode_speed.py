"""Milliseconds per decode step of the hf engine's static-cache loop, per decode mode, against the bandwidth limit.

A random Qwen2.5-shaped model (the bundled SmolLM2 vocabulary of 49152 tokens, tied embeddings) decodes ``--rows``
sequences of ``--response-length`` tokens after ``--prompt-length``-token prompts, in each mode of the decode loop
(verl/workers/rollout/decode/, static-cache forward: eager, compile, and cuda_graph on CUDA), under autocast in the
device's precision. Reported per mode: the median over ``--repeats`` calls of the time per generated token (prefill
included, the first call of each mode is a warm-up and not counted: compilation and graph capture), the tokens of
the eager and other modes compared, and on CUDA the bandwidth limit: the bytes a step must read (weights in the
compute dtype + the KV cache filled so far, on average) over the device's memory bandwidth. ``--weights`` runs each
mode on the model's own modules (``module``) and on the forward's stacked copy in the compute dtype (``decode``,
verl/workers/rollout/decode/decode_weights.py), side by side in one run.

    python bench/decode_speed.py --smoke                      # tiny shape, CI
    python bench/decode_speed.py --shapes 0.5B 1.5B           # on a CUDA machine: the issue-12 shapes, 128 rows
    python bench/decode_speed.py --shapes 0.5B 1.5B --count-ops  # aten calls of one step, modules vs weight copy
    python bench/decode_speed.py --shapes S --modes eager --weights module decode --rows 16 --prompt-length 32 \
        --response-length 64 --threads 1                      # the weight copy against the modules, on CPU
    ATEN_CPU_CAPABILITY=avx2 DNNL_MAX_CPU_ISA=AVX2 python bench/decode_speed.py --shapes tiny S --modes eager compile
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from bench._common import default_device, markdown_table, save_result  # noqa: E402
from verl.workers.rollout.decode import DECODE_MODES  # noqa: E402
from verl.workers.rollout.decode.loop import ATTENTION_WINDOWS  # noqa: E402

# Qwen2.5 (and one Qwen3) shapes (hidden, layers, heads, kv heads, ffn) with the SmolLM2 vocabulary: 0.5B -> 402M
# parameters
SHAPES = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=512),
    "S": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=1024, vocab_size=49152),
    "135M": dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                 intermediate_size=1536, vocab_size=49152),  # SmolLM2-135M's shape (the bundled model)
    "0.5B": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                 intermediate_size=4864, vocab_size=49152),
    "1.5B": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                 intermediate_size=8960, vocab_size=49152),
    # Qwen3-0.6B's shape (per-head q/k norms, head_dim 128)
    "qwen3-0.6B": dict(arch="qwen3", hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, intermediate_size=3072, vocab_size=49152),
}  # fmt: skip
# HBM bandwidth of known GPUs, bytes/s (vendors' data sheets)
GPU_BANDWIDTH = {"H100 PCIe": 2.0e12, "H100": 3.35e12, "H200": 4.8e12, "A100": 2.0e12, "L40S": 0.864e12}


def build_model(shape: str, device: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen3Config

    spec = dict(SHAPES[shape])
    config_class = Qwen3Config if spec.pop("arch", "qwen2") == "qwen3" else Qwen2Config
    config = config_class(**spec, tie_word_embeddings=True, max_position_embeddings=4096)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).to(device).eval()


def bandwidth_limit_ms(model: torch.nn.Module, rows: int, prompt: int, response: int, dtype: torch.dtype) -> float:
    """Milliseconds to read the weights once plus the average KV cache of a step at the GPU's bandwidth."""
    if not torch.cuda.is_available():
        return float("nan")
    name = torch.cuda.get_device_name(0)
    bandwidth = next((v for k, v in sorted(GPU_BANDWIDTH.items(), key=lambda kv: -len(kv[0])) if k in name), None)
    if bandwidth is None:
        return float("nan")
    cfg = model.config
    size = torch.tensor([], dtype=dtype).element_size()
    weights = sum(p.numel() for p in model.parameters()) * size
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * rows * (prompt + response / 2) * size
    return (weights + kv) / bandwidth * 1e3


# aten calls that only make a view (no kernel on a GPU)
VIEW_OPS = {
    "view", "t", "_unsafe_view", "transpose", "slice", "expand", "alias", "unsqueeze", "squeeze", "select", "split",
    "split_with_sizes", "_reshape_alias", "as_strided", "detach", "permute", "lift_fresh",
}  # fmt: skip


def count_step_ops(model: torch.nn.Module, decode_weights: bool, rows: int, device: str, dtype: torch.dtype) -> dict:
    """The aten calls of one eager decode step under autocast *without* its weight cache (what a CUDA graph replays:
    a graph cannot keep autocast's cached casts), split into view-only calls and calls that launch a kernel."""
    import collections

    from torch.utils._python_dispatch import TorchDispatchMode

    from verl.workers.rollout.base import SamplingSettings
    from verl.workers.rollout.decode import DecodeLoop

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.calls: collections.Counter = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.calls[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    loop = DecodeLoop(model, mode="eager", decode_weights=decode_weights)
    loop.attend_filled_only = False  # the cuda_graph mode's attention windows under the mask, as it reads them
    counter, original = Count(), loop._step
    seen: list[int] = []

    def step(st, c, live):
        if not seen:  # the first decode step only
            seen.append(1)
            with counter:
                return original(st, c, live)
        return original(st, c, live)

    loop._step = step
    ids = torch.randint(0, model.config.vocab_size, (rows, 8), device=device)
    settings = SamplingSettings(do_sample=True, temperature=1.0, top_p=1.0, top_k=-1, response_length=2,
                                min_new_tokens=2, calculate_log_probs=False)  # fmt: skip
    with torch.autocast(device, dtype=dtype, enabled=dtype != torch.float32, cache_enabled=False):
        loop.generate(ids, torch.ones_like(ids), torch.arange(8, device=device).expand_as(ids), settings, [], 0)
    kernels = {k: v for k, v in counter.calls.items() if k not in VIEW_OPS}
    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:12]
    return dict(aten_calls=sum(counter.calls.values()), kernel_calls=sum(kernels.values()), top=top)


def run(args: argparse.Namespace) -> dict:
    from verl.hardware.precision import resolve_dtype
    from verl.workers.rollout.base import SamplingSettings
    from verl.workers.rollout.decode import DecodeLoop

    device = args.device or default_device()
    dtype = resolve_dtype("auto", torch.device(device))
    settings = SamplingSettings(
        do_sample=True, temperature=1.0, top_p=1.0, top_k=-1, response_length=args.response_length,
        min_new_tokens=args.response_length, calculate_log_probs=False,
    )  # fmt: skip
    modes = [m for m in args.modes if "cuda_graph" not in m or device == "cuda"]
    rows_out = []
    for shape in args.shapes:
        model = build_model(shape, device)
        gen = torch.Generator().manual_seed(0)
        ids = torch.randint(0, model.config.vocab_size, (args.rows, args.prompt_length), generator=gen).to(device)
        mask = torch.ones_like(ids)
        pos = torch.arange(args.prompt_length, device=device).expand_as(ids)
        if args.count_ops:
            for weights in args.weights:
                ops = count_step_ops(model, weights == "decode", min(args.rows, 8), device, dtype)
                print(f"{shape} {weights}: {ops['kernel_calls']} kernel-launching aten calls per step "
                      f"({ops['aten_calls']} with views); most: {ops['top']}", flush=True)  # fmt: skip
                rows_out.append(dict(shape=shape, weights=weights, step_ops=ops, device=device, dtype=str(dtype)))
            continue
        reference = None
        # the attention-window A/B applies to the cuda_graph mode only (the other modes read no windows)
        runs = [(m, w, n) for m in modes for w in args.weights
                for n in (args.attention_windows if m == "cuda_graph" else [None])]  # fmt: skip
        for mode, weights, windows in runs:
            decoder = DecodeLoop(model, mode=mode, decode_weights=weights == "decode")
            if windows is not None:
                decoder.attention_windows = windows
            times, first_call = [], float("nan")
            for i in range(args.repeats + 1):
                torch.manual_seed(1)
                if device == "cuda":
                    torch.cuda.synchronize()
                start, cpu0 = time.perf_counter(), time.process_time()
                with torch.autocast(device, dtype=dtype, enabled=dtype != torch.float32):
                    tokens, _ = decoder.generate(ids, mask, pos, settings, eos_ids=[], pad_id=0)
                if device == "cuda":
                    torch.cuda.synchronize()
                # CPU time on CPU (steady on shared cores), wall time on GPUs
                spent = time.process_time() - cpu0 if device == "cpu" else time.perf_counter() - start
                if i > 0:
                    times.append(spent)
                else:
                    first_call = time.perf_counter() - start  # wall: compilation / graph capture included
            reference = tokens if reference is None else reference
            same = bool(torch.equal(tokens, reference))
            # where the rows first part from the reference's (median over rows; response_length: never). A bug
            # parts at step 0; bf16 rounding in another reduction order moves an inverse-CDF draw of a
            # near-uniform random model across a bin edge somewhere later, after which the rows are unrelated
            differs = (tokens != reference).to(torch.int64)
            first = torch.where(differs.any(1), differs.argmax(1), torch.full_like(differs[:, 0], tokens.shape[1]))
            parted_at = float(first.float().median())
            ms = statistics.median(times) / args.response_length * 1e3
            limit = bandwidth_limit_ms(model, args.rows, args.prompt_length, args.response_length, dtype)
            rows_out.append(dict(shape=shape, mode=mode, weights=weights, attention_windows=windows,
                                 rows=args.rows, ms_per_step=ms,
                                 bandwidth_limit_ms=limit,
                                 first_call_s=first_call, same_tokens_as_first_mode=same,
                                 median_step_rows_part_from_first_mode=parted_at, dtype=str(dtype),
                                 device=device))  # fmt: skip
            print(
                f"{shape} {mode} {weights}"
                + ("" if windows is None else f" windows={windows}")
                + f": {ms:.2f} ms/step (limit {limit:.3f} ms), same tokens: {same}"
                + ("" if same else f" (rows part from the first mode's at step {parted_at:.0f}, median)"),
                flush=True,
            )
    return {"results": rows_out, "args": vars(args)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["0.5B", "1.5B"], choices=sorted(SHAPES))
    parser.add_argument("--modes", nargs="+", default=["eager", "compile", "cuda_graph"], choices=DECODE_MODES)
    parser.add_argument(
        "--weights", nargs="+", default=["module", "decode"], choices=["module", "decode"],
        help="decode on the model's modules and/or on the forward's stacked weight copy",
    )  # fmt: skip
    parser.add_argument(
        "--attention-windows", nargs="+", type=int, default=[ATTENTION_WINDOWS],
        help="the cuda_graph mode's attention windows per cache (1: attend over the whole cache); one row each",
    )  # fmt: skip
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--prompt-length", type=int, default=64)
    parser.add_argument("--response-length", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--count-ops", action="store_true", help="count the aten calls of one step per --weights (no timing)"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny shape, 4 rows, 8 tokens, eager only")
    args = parser.parse_args(argv)
    if args.smoke:
        args.shapes, args.rows, args.prompt_length, args.response_length, args.repeats = ["tiny"], 4, 8, 8, 1
        args.modes = ["eager"] + (["cuda_graph"] if torch.cuda.is_available() else [])
    if args.threads:
        torch.set_num_threads(args.threads)
    payload = run(args)
    if args.count_ops:
        print("saved", save_result("decode_step_ops", payload, smoke=args.smoke, per_machine=True))
        return
    header = ["shape", "mode", "weights", "windows", "rows", "dtype", "ms/step", "bandwidth limit ms", "first call s"]
    header.append("same tokens")
    keys = ["shape", "mode", "weights", "attention_windows", "rows", "dtype", "ms_per_step", "bandwidth_limit_ms",
            "first_call_s"]  # fmt: skip
    table = [[r[k] for k in keys] + [r["same_tokens_as_first_mode"]] for r in payload["results"]]
    print(markdown_table(header, table))
    print("saved", save_result("decode_speed", payload, smoke=args.smoke, per_machine=True))


if __name__ == "__main__":
    main()
