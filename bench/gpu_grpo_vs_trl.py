"""GRPO seconds per step on one GPU, ours vs TRL's ``GRPOTrainer``, for Qwen2.5-0.5B/1.5B-shaped random models.

The issue-12 table in one command. Each (shape, side) runs in its own process, so the peak GPU memory of a side is
its own and one side running out of memory does not take the other down. Work per step, both sides (the pairing of
bench/_sides.py): B=16 prompts x G=8 responses, prompts of ~64 tokens, exactly 256 generated tokens
(min_new_tokens = max), bf16 autocast over fp32 weights (fp32 on devices without native bf16), one optimizer step
per rollout over all sequences, beta 0, the toy reward. Models: random Qwen2.5-shaped weights (0.5B: 402M, 1.5B:
1.3B parameters with the bundled SmolLM2 tokenizer's 49152-token vocabulary, tied embeddings).

Sides: ``verl`` (the product path of ``main_ppo``, engine ``hf``: the static-cache decode loop, CUDA graphs by
default), ``trl-ckpt-off`` (TRL 1.16 with gradient checkpointing off: the same work as ours), ``trl-ckpt-on``
(TRL's default). Reported per row: median seconds per step after the warm-up; for ours also generation and update
seconds, decode ms per step (generation / response length), ``perf/mfu/actor`` and the peak GPU memory.

    python bench/gpu_grpo_vs_trl.py                       # on a CUDA machine: 0.5B and 1.5B, all three sides
    python bench/gpu_grpo_vs_trl.py --shapes 0.5B --sides verl
    python bench/gpu_grpo_vs_trl.py --smoke               # tiny shape on any device (CI)
    python bench/gpu_grpo_vs_trl.py --sides verl --verl-override actor_rollout_ref.model.use_fused_kernels=true \
        --tag fused                                       # our side with extra config overrides, saved apart
    python bench/gpu_grpo_vs_trl.py --shapes 7B --sides verl --memory-cap-gb 79 --batch 4 --group 8 \
        --verl-override actor_rollout_ref.actor.fsdp_config.offload_policy=true ...  # does 7B fit one 80 GB card?
    python bench/gpu_grpo_vs_trl.py --merge a.json b.json # one table from earlier runs' result files

``--tokenizer DIR`` takes a saved tokenizer folder (``config.json`` + tokenizer files) instead of the bundled
SmolLM2 model (which needs its GGUF file and ``gguf``). ``--memory-cap-gb`` caps each side's CUDA allocator at that
many GiB (``torch.cuda.set_per_process_memory_fraction``), so a larger card answers for a smaller one (an H100 80GB
has 79.6 GiB, of which the CUDA context takes about half a GiB). A side that fails is reported as ``out of memory``
only when it was one (``torch.OutOfMemoryError`` caught, or CUDA's out-of-memory text in its stderr), else as
``failed (exit N): <last line of its stderr>``. ``--merge`` pairs ours and TRL only from the same GPU (its UUID).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import BUNDLED_SMOLLM2, markdown_table, save_result  # noqa: E402

MARK = "GPU_GRPO_RESULT "
SIDES = ("verl", "trl-ckpt-off", "trl-ckpt-on")
# Qwen2.5-7B's shape (hidden, layers, heads, kv heads, ffn; untied LM head) with the tokenizer's vocabulary: 6.9B
# parameters with SmolLM2's 49152 tokens. The smaller shapes are bench/decode_speed.py's SHAPES (tied embeddings).
LARGE_SHAPES = {
    "7B": dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
               intermediate_size=18944, vocab_size=49152),
}  # fmt: skip
# what marks a child's death as CUDA running out of memory (torch's message, its exception's name, the driver's)
OOM_TEXTS = ("CUDA out of memory", "torch.OutOfMemoryError", "CUDA error: out of memory")


def shape_spec(shape: str) -> tuple[dict, bool]:
    """The Qwen2Config fields of ``shape`` and whether its embeddings are tied."""
    from bench.decode_speed import SHAPES

    if shape in LARGE_SHAPES:
        return dict(LARGE_SHAPES[shape]), False
    if shape in SHAPES:
        return dict(SHAPES[shape]), True
    raise ValueError(f"unknown shape {shape!r}; known: {sorted(SHAPES) + sorted(LARGE_SHAPES)}")


def make_model_dir(shape: str, root: str, tokenizer_path: str | None = None) -> str:
    """A random Qwen2.5-shaped model (bench/decode_speed.py's shapes, or :data:`LARGE_SHAPES`) with the bundled
    SmolLM2 tokenizer, or the saved tokenizer folder ``tokenizer_path``. The large shapes are initialised on the
    GPU in bf16 and saved in bf16 (half the bytes to write and read; the trainer loads fp32 master weights anyway)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen3Config

    from verl.models.loader import load_tokenizer, resolve_model_path

    spec, tied = shape_spec(shape)
    qwen3 = spec.pop("arch", "qwen2") == "qwen3"  # a Qwen3 shape (per-head q/k norms), else Qwen2.5
    path = os.path.join(root, f"{'qwen3' if qwen3 else 'qwen2.5'}-{shape}-random")
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    tokenizer = load_tokenizer(tokenizer_path or resolve_model_path(BUNDLED_SMOLLM2))
    config = (Qwen3Config if qwen3 else Qwen2Config)(
        **dict(spec, vocab_size=len(tokenizer)), tie_word_embeddings=tied, max_position_embeddings=4096,
        rope_theta=1e6, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    if shape in LARGE_SHAPES and torch.cuda.is_available():
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    else:
        model = AutoModelForCausalLM.from_config(config)
    tmp = f"{path}.partial-{os.getpid()}"
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    os.replace(tmp, path)  # a run killed while writing leaves no half model under the final name
    return path


def _work(args: dict):
    from bench._common import default_device, make_prompt_texts
    from bench._sides import GRPOWork
    from verl.hardware.precision import precision_for
    from verl.models.loader import load_tokenizer

    path = make_model_dir(args["shape"], args["root"], args.get("tokenizer"))
    prompts = make_prompt_texts(load_tokenizer(path), count=8 * args["batch"], length=args["prompt_length"])
    return GRPOWork(
        model_path=path,
        prompts=prompts,
        batch_prompts=args["batch"],
        group_size=args["group"],
        response_length=args["response_length"],
        prompt_length=args["prompt_length"] + 16,  # room for the tokenizer's count around the target length
        beta=0.0,
        dtype=precision_for(default_device()).name,
        trl_gradient_checkpointing=args["side"] == "trl-ckpt-on",
        engine="hf",
        extra_overrides=list(args.get("verl_overrides", [])),
    )


def run_side(args: dict) -> dict:
    """Build one side in this process, run warm-up + timed steps; per-step seconds and what the side reports."""
    import torch

    from bench._sides import VerlSide, build_trl_trainer

    cuda = torch.cuda.is_available()
    cap = args.get("memory_cap_gb")
    if cap and cuda:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, cap * 2**30 / total))
    work = _work(args)
    if cuda:  # a large shape's model was built on the GPU and freed: its bytes are no part of the step's peak
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    steps = args["warmup"] + args["steps"]
    times: list[float] = []
    extra: dict[str, list[float]] = {}
    try:
        if args["side"] == "verl":
            side = VerlSide(work)
            for _ in range(steps):
                if cuda:
                    torch.cuda.synchronize()
                start = time.perf_counter()
                metrics = side.step()
                if cuda:
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
                for key in ("timing_s/gen", "timing_s/update_actor", "perf/mfu/actor", "response_length/mean"):
                    value = metrics.get(key)
                    if isinstance(value, list):
                        value = statistics.mean(value)
                    if value is not None:
                        extra.setdefault(key, []).append(float(value))
        else:
            from transformers import TrainerCallback

            marks: list[float] = []

            class Clock(TrainerCallback):
                def on_train_begin(self, *a, **k):
                    marks.append(time.perf_counter())

                def on_step_end(self, *a, **k):
                    if cuda:
                        torch.cuda.synchronize()
                    marks.append(time.perf_counter())

            build_trl_trainer(work, [Clock()], max_steps=steps).train()
            times = [b - a for a, b in zip(marks, marks[1:])]
    except torch.OutOfMemoryError as err:
        peak = torch.cuda.max_memory_allocated() / 1e9 if cuda else None
        return {"args": args, "oom": True, "error": str(err).splitlines()[0], "peak_gpu_gb": peak, "gpu": _gpu()}
    peak = torch.cuda.max_memory_allocated() / 1e9 if cuda else None
    timed = slice(args["warmup"], None)
    return {
        "args": args,
        "oom": False,
        "step_s": times[timed],
        "extra": {k: v[timed] for k, v in extra.items()},
        "peak_gpu_gb": peak,
        "gpu": _gpu(),
    }


def _gpu() -> dict | None:
    """The GPU a side ran on (name, UUID, GiB): ``--merge`` pairs ours and TRL only from the same card."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "uuid": str(getattr(props, "uuid", "")), "total_gib": props.total_memory / 2**30}


def classify_failure(args: dict, exit_code: int, stderr_tail: list[str]) -> dict:
    """The result of a side that printed no result: out of memory only when its stderr says CUDA ran out of
    memory, else ``failed (exit N): <last non-empty stderr line>`` (a signal: ``exit -N``)."""
    text = "\n".join(stderr_tail)
    if any(mark in text for mark in OOM_TEXTS):
        return {"args": args, "oom": True, "exit_code": exit_code}
    last = next((line.strip() for line in reversed(stderr_tail) if line.strip()), "no output on stderr")
    return {"args": args, "oom": False, "exit_code": exit_code, "failed": f"failed (exit {exit_code}): {last}"}


def _spawn(args: dict, cmd: list[str] | None = None) -> dict:
    """Run one side in a child process; its stderr passes through to ours (and its last lines are kept)."""
    cmd = cmd or [sys.executable, os.path.abspath(__file__), "--side-args", json.dumps(args)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    tail: collections.deque[str] = collections.deque(maxlen=40)

    def pump() -> None:
        for line in proc.stderr:
            sys.stderr.write(line)
            tail.append(line.rstrip("\n"))
        sys.stderr.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    stdout = proc.stdout.read()
    proc.wait()
    reader.join()
    for line in stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    return classify_failure(args, proc.returncode, list(tail))


def _state(result: dict | None) -> str | None:
    """``None`` for a side that ran, else what to print in its place."""
    if result is None:
        return "-"
    if result.get("oom"):
        return "out of memory"
    return result.get("failed")


def summarize(results: list[dict]) -> str:
    """One row per shape: ours (step, generation, update, decode ms/step, MFU, peak memory) and each TRL side."""
    by_shape: dict[str, dict[str, dict]] = {}
    for r in results:
        by_shape.setdefault(r["args"]["shape"], {})[r["args"]["side"]] = r

    def med(values: list[float] | None) -> float:
        return statistics.median(values) if values else float("nan")

    def card(result: dict | None) -> str | None:
        return ((result or {}).get("gpu") or {}).get("uuid")

    rows = []
    for shape, sides in by_shape.items():
        ours = sides.get("verl")
        row: list = [shape]
        if _state(ours) is None:
            ex = ours["extra"]
            gen = med(ex.get("timing_s/gen"))
            row += [med(ours["step_s"]), gen, med(ex.get("timing_s/update_actor"))]
            row += [gen / ours["args"]["response_length"] * 1e3, med(ex.get("perf/mfu/actor")), ours["peak_gpu_gb"]]
        else:
            row += [_state(ours)] + ["-"] * 5
        ratios = []
        for name in ("trl-ckpt-off", "trl-ckpt-on"):
            trl = sides.get(name)
            if _state(trl) is not None:
                row += [_state(trl), "-"]
                continue
            row += [med(trl["step_s"]), trl["peak_gpu_gb"]]
            if isinstance(row[1], float) and row[-2] > 0:
                # a ratio only between runs on the same card (results merged from several runs may differ)
                ratios.append(f"{row[1] / row[-2]:.2f}" if card(ours) == card(trl) else "other GPU")
        row.append(" / ".join(ratios) or "-")
        rows.append(row)
    header = ["model", "ours s/step", "generation s", "update s", "decode ms/step", "MFU actor", "ours peak GB"]
    header += ["TRL ckpt off s", "peak GB", "TRL ckpt on s", "peak GB", "ours/TRL (off / on)"]
    return markdown_table(header, rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side-args", help=argparse.SUPPRESS)
    parser.add_argument("--shapes", nargs="+", default=["0.5B", "1.5B"])
    parser.add_argument("--sides", nargs="+", default=None, choices=SIDES, help="default: all three")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt-length", type=int, default=64)
    parser.add_argument("--response-length", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "verl_bench_qwen_shapes"))
    parser.add_argument("--smoke", action="store_true", help="tiny shape, B=2, G=2, 8 tokens, ours + TRL off")
    parser.add_argument(
        "--verl-override", action="append", default=[], help="KEY=VALUE added to our side's config (repeatable)"
    )
    parser.add_argument("--tag", default="", help="suffix of the result file name (runs with overrides)")
    parser.add_argument("--tokenizer", default=None, help="a saved tokenizer folder (default: the bundled SmolLM2's)")
    parser.add_argument("--memory-cap-gb", type=float, default=None, help="cap each side's CUDA memory (GiB)")
    parser.add_argument("--merge", nargs="+", metavar="RESULT_JSON", help="one table from these result files")
    args = parser.parse_args(argv)
    if args.side_args:
        result = run_side(json.loads(args.side_args))
        print(MARK + json.dumps(result), flush=True)
        return
    if args.merge:
        merge(args.merge, args.tag or "merged", args.smoke)
        return
    if args.smoke:
        args.shapes, args.batch, args.group = ["tiny"], 2, 2
        args.sides = args.sides or ["verl", "trl-ckpt-off"]
        args.prompt_length, args.response_length, args.warmup, args.steps = 8, 8, 0, 1
    args.sides = args.sides or list(SIDES)
    for shape in args.shapes:
        shape_spec(shape)  # an unknown shape is refused before any side starts
    results = []
    for shape in args.shapes:
        for side in args.sides:
            side_args = dict(
                shape=shape, side=side, batch=args.batch, group=args.group, prompt_length=args.prompt_length,
                response_length=args.response_length, warmup=args.warmup, steps=args.steps, root=args.root,
                verl_overrides=args.verl_override, tokenizer=args.tokenizer, memory_cap_gb=args.memory_cap_gb,
            )  # fmt: skip
            print(f"running {shape} {side}", file=sys.stderr, flush=True)
            results.append(_spawn(side_args))
            table = summarize(results)
            name = "gpu_grpo_vs_trl" + (f"_{args.tag}" if args.tag else "")
            payload = {"results": results, "table": table, "verl_overrides": args.verl_override}
            path = save_result(name, payload, args.smoke, per_machine=True)
    print(table)
    print(f"results: {path}")
    failed = [f"{r['args']['shape']} {r['args']['side']}" for r in results if r.get("failed")]
    if failed:  # out of memory is a result (the table says it); a crash is not
        sys.exit(f"sides that failed: {', '.join(failed)}")


def merge(files: list[str], tag: str, smoke: bool = False) -> None:
    """One table from the ``results`` of several result files (e.g. ours and TRL run apart on one machine); a
    later file's row for the same (shape, side) replaces an earlier one. Saved as ``gpu_grpo_vs_trl_<tag>``."""
    rows: dict[tuple[str, str], dict] = {}
    for file in files:
        with open(file) as fh:
            record = json.load(fh)
        if "results" not in record:
            raise ValueError(f"{file}: not a gpu_grpo_vs_trl result file (no 'results')")
        for result in record["results"]:
            rows[(result["args"]["shape"], result["args"]["side"])] = dict(result, source=os.path.basename(file))
    results = list(rows.values())
    table = summarize(results)
    path = save_result(f"gpu_grpo_vs_trl_{tag}", {"results": results, "table": table, "merged_from": files}, smoke,
                       per_machine=True)  # fmt: skip
    print(table)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
