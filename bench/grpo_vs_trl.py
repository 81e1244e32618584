"""Seconds per GRPO optimizer step: verl vs TRL's ``GRPOTrainer``, identical work, same machine, same run.

Each case (model config, beta, torch threads, engine pairing) runs in a fresh subprocess that builds both trainers
and alternates them step by step: TRL's training loop runs, and after each TRL optimizer step (``on_step_end``)
one verl ``train_step`` runs. After ``--warmup`` pairs, the median over ``--steps`` pairs is reported per side with
the ratio ours/TRL (target: <= 0.5), in wall seconds and in process CPU seconds (steadier on shared cores).

Work per step (both sides): B prompts x G generations, prompt 32 tokens, exactly ``--response-length`` generated
tokens (min_new_tokens = max), one optimizer step over all B*G sequences in one forward/backward, reward = the toy
vowel-share function of bench/toy_reward.py, KL-to-reference in the loss with coefficient beta (k3 estimator).

- config S: random Llama (hidden 256, 4 layers, 4 heads / 4 KV heads, FFN 1024, ~4.3M params), byte tokenizer,
  B=8, G=8, fp32.
- config M: bundled SmolLM2-135M-Instruct, B=8, G=4, the hardware's precision on both sides: bf16 autocast (fp32
  master weights) where the device multiplies bf16 natively (AMX, AVX512-BF16, CUDA), fp32 elsewhere.

Engine pairings: ``default`` = what each side uses out of the box here (verl: ``rollout.name=auto``, i.e. vLLM when
the vllm extra is installed and the model suits it, else ``hf``; TRL: ``use_vllm=False``, i.e. transformers
``generate``); ``hf`` = our ``hf`` engine (the decode loop of verl/workers/rollout/decode/ on the static-cache forward)
vs TRL's ``generate``; ``model_cache`` = our decode loop on the model's own forward and KV cache (the path of
architectures without a static-cache forward) vs TRL's ``generate``.

    python bench/grpo_vs_trl.py --smoke
    python bench/grpo_vs_trl.py                       # the full matrix (long: tens of minutes on 2 cores)
    python bench/grpo_vs_trl.py --configs S --threads 1 --betas 0
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import BUNDLED_SMOLLM2, markdown_table, save_result  # noqa: E402

MARK = "GRPO_VS_TRL_RESULT "


@dataclass
class Case:
    config: str  # S | M
    beta: float
    threads: int
    engine: str  # default | hf | model_cache
    warmup: int
    steps: int
    response_length: int = 64
    smoke: bool = False
    # TRL 1.16 turns gradient checkpointing on by default; off is the same work as ours (we do not checkpoint)
    trl_grad_ckpt: bool = False


def _work_for(case: Case):
    """Model path, prompts and batch shape of a case (built inside the case's subprocess)."""
    import torch

    from bench._common import default_device, make_config_s_dir, make_prompt_texts
    from bench._sides import GRPOWork
    from verl.hardware.precision import precision_for
    from verl.models.loader import load_tokenizer, resolve_model_path

    if case.config == "S":
        path = make_config_s_dir(os.path.join(tempfile.gettempdir(), "verl_bench_config_s"))
        b, g, dtype = 8, 8, "float32"
    elif case.config == "M":
        path = resolve_model_path(BUNDLED_SMOLLM2)
        # the hardware's precision (bf16 autocast where the CPU/GPU has native bf16 matmul, else fp32), resolved
        # once here so both sides run the same dtype
        b, g, dtype = 8, 4, precision_for(default_device()).name
    else:
        raise ValueError(f"unknown config {case.config!r}; expected S or M")
    if case.smoke:
        b, g = 2, 2
    tokenizer = load_tokenizer(path)
    prompts = make_prompt_texts(tokenizer, count=max(8 * b, 16), length=32 if not case.smoke else 8)
    torch.manual_seed(0)
    return GRPOWork(
        model_path=path,
        prompts=prompts,
        batch_prompts=b,
        group_size=g,
        response_length=case.response_length,
        prompt_length=32 if not case.smoke else 8,
        beta=case.beta,
        dtype=dtype,
        trl_gradient_checkpointing=case.trl_grad_ckpt,
        # default: our out-of-the-box engine (rollout.name=auto: vLLM when installed and usable, else hf);
        # hf: our hf engine (static-cache forward); model_cache: the same loop on the model's own forward
        engine={"default": "auto", "hf": "hf", "model_cache": "hf"}[case.engine],
    )


def run_case(case: Case) -> dict:
    """Build both sides in this process and alternate them; returns per-side step times."""
    import torch

    torch.set_num_threads(case.threads)
    from bench._sides import VerlSide, alternate_in_trl_loop
    from verl.workers.rollout.hf_rollout import HFRollout

    HFRollout.use_static_cache = case.engine != "model_cache"
    work = _work_for(case)
    ours = VerlSide(work)

    def report(i: int, pair: dict[str, float]) -> None:
        tag = "warmup" if i < case.warmup else "timed"
        print(
            f"  pair {i} ({tag}): verl {pair['verl_s']:.2f} s (cpu {pair['verl_cpu_s']:.2f}), "
            f"TRL {pair['trl_s']:.2f} s (cpu {pair['trl_cpu_s']:.2f})",
            file=sys.stderr,
            flush=True,
        )

    times = alternate_in_trl_loop(work, ours, case.warmup, case.steps, on_pair=report)
    timing = {k: v for k, v in ours.last_metrics.items() if k.startswith("timing_s/")}
    return {
        "case": asdict(case),
        **times,
        "verl_last_step_timing": timing,
        "verl_response_length_mean": ours.last_metrics.get("response_length/mean"),
    }


def _spawn(case: Case) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--case", json.dumps(asdict(case))]
    env = dict(os.environ, OMP_NUM_THREADS=str(case.threads), MKL_NUM_THREADS=str(case.threads))
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None, text=True, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    raise RuntimeError(f"case {case} failed (exit code {proc.returncode}); see the output above")


def summarize(results: list[dict]) -> str:
    """One row per case: median wall and CPU seconds per step on each side and the ratios ours/TRL."""
    import statistics

    rows = []
    for r in results:
        c = r["case"]
        med = {k: statistics.median(r[k]) for k in ("verl_s", "trl_s", "verl_cpu_s", "trl_cpu_s")}
        wall_ratio = med["verl_s"] / med["trl_s"]
        cpu_ratio = med["verl_cpu_s"] / med["trl_cpu_s"]
        rows.append(
            [c["config"], c["beta"], c["threads"], c["engine"], "on" if c.get("trl_grad_ckpt") else "off"]
            + [len(r["verl_s"])]
            + [med["verl_s"], med["trl_s"], wall_ratio, med["verl_cpu_s"], med["trl_cpu_s"], cpu_ratio]
            + ["yes" if cpu_ratio <= 0.5 else "no"]
        )
    header = ["config", "beta", "threads", "engines", "TRL grad ckpt", "steps"]
    header += ["verl wall s", "TRL wall s", "wall ours/TRL"]
    header += ["verl CPU s", "TRL CPU s", "CPU ours/TRL", "CPU ratio <= 0.5"]
    return markdown_table(header, rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="config S shrunk to seconds: B=2, G=2, 8 tokens")
    parser.add_argument("--configs", default="S,M")
    parser.add_argument(
        "--trl-grad-ckpt",
        default="off",
        help="TRL gradient checkpointing: off (same work as ours), on (TRL's default), or off,on for both rows",
    )
    parser.add_argument("--betas", default="0,0.04")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--engines", default="default,hf,model_cache")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--m-threads", default="2", help="threads for config M (slow: one setting by default)")
    parser.add_argument("--m-betas", default="0", help="betas for config M")
    args = parser.parse_args(argv)

    if args.case:
        result = run_case(Case(**json.loads(args.case)))
        print(MARK + json.dumps(result), flush=True)
        return

    cases: list[Case] = []
    if args.smoke:
        cases = [Case("S", 0.04, 1, "default", warmup=1, steps=1, response_length=8, smoke=True)]
    else:
        for config in [c.strip() for c in args.configs.split(",") if c.strip()]:
            threads = args.m_threads if config == "M" else args.threads
            betas = args.m_betas if config == "M" else args.betas
            for beta in [float(b) for b in betas.split(",")]:
                for t in [int(x) for x in threads.split(",")]:
                    for engine in args.engines.split(","):
                        for ckpt in args.trl_grad_ckpt.split(","):
                            case = Case(config, beta, t, engine.strip(), args.warmup, args.steps)
                            cases.append(replace(case, trl_grad_ckpt=ckpt.strip() == "on"))
    results = []
    for case in cases:
        print(f"case {asdict(case)}", file=sys.stderr, flush=True)
        results.append(_spawn(case))
        # keep partial results: a long matrix that is interrupted still leaves a record
        payload = {"results": results, "table": summarize(results)}
        path = save_result("grpo_vs_trl", payload, smoke=args.smoke, per_machine=True)
    print(f"results: {path}", file=sys.stderr)
    print(summarize(results))


if __name__ == "__main__":
    main()
