"""Synchronous vs one-step-off-policy vs fully asynchronous GRPO on the same work, with long-tailed responses.

The policy is a tiny random Llama whose end-of-sequence probability is fixed per token (a geometric hazard, see
:func:`make_hazard_model`): response lengths are long-tailed (mean about ``1 / hazard``, a batch's longest several
times that, capped at ``--response-length``), which is the situation where a synchronous step waits for its slowest
sample. Each mode trains the same number of steps on the same prompts with the same seed; the asynchronous ones run
the rollouter as a second process (gloo weight pushes). Reported per mode: wall time of the steps (the rollouter's
start-up excluded and given separately), response tokens per second, the time the trainer waited for rollouts
(``timing_s/gen``), the mean score of the last two steps, the largest staleness consumed. Results:
``bench/results/async_vs_sync.json``.

    python bench/async_vs_sync.py                     # 8 steps each (about 3 minutes on 2 CPU cores)
    python bench/async_vs_sync.py --steps 2 --smoke   # a quick check of the script
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import markdown_table, save_result  # noqa: E402

REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    # the share of digits in the response: learnable from a near-uniform random policy
    return sum(ch.isdigit() for ch in solution_str) / max(len(solution_str), 1)
"""

MODES = {
    "sync": [],
    "one_step_off": ["async_training.mode=one_step_off"],
    "fully_async": [
        "async_training.mode=fully_async",
        "async_training.staleness_threshold=2",
        "async_training.partial_rollout=true",
    ],
}


def make_hazard_model(path: str, hazard: float, seed: int = 0) -> None:
    """A tiny random Llama that ends each response after a token with probability about ``hazard``.

    The residual stream carries a constant in dimension 0 (every embedding has it, no layer writes to it), so after
    the final RMSNorm that dimension is a constant ``h0``; only the EOS row of ``lm_head`` reads it, adding a fixed
    logit ``b`` to EOS. The other logits stay near 0 (small random weights), so with V tokens
    ``P(eos) = e^b / (V - 1 + e^b)``, solved for ``b``.
    """
    import math

    import torch

    from verl.models.tiny import TinyModelSpec, make_byte_tokenizer, make_tiny_causal_lm

    tok = make_byte_tokenizer()
    spec = TinyModelSpec(hidden_size=64, num_hidden_layers=2, intermediate_size=128)
    model = make_tiny_causal_lm(spec=spec, seed=seed, tokenizer=tok)
    eos = tok.eos_token_id
    with torch.no_grad():
        emb = model.model.embed_tokens.weight
        emb[:, 0] = 1.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0
        # RMSNorm of a residual whose dim 0 is 1 and the rest ~N(0, 0.02): rms = sqrt(mean of squares)
        rms = emb.pow(2).mean(dim=1).sqrt().mean().item()
        h0 = (1.0 / rms) * float(model.model.norm.weight[0])
        vocab = emb.shape[0]
        bias = math.log(hazard * (vocab - 1) / (1.0 - hazard))
        model.lm_head.weight[:, 0] = 0.0
        model.lm_head.weight[eos, 0] = bias / h0
    model.save_pretrained(path)
    tok.save_pretrained(path)


def run_mode(mode: str, model: str, data: str, reward: str, args: argparse.Namespace, out: str) -> dict:
    from verl.trainer.config import load_config
    from verl.trainer.ppo.runner import build_ppo_trainer

    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={model}",
            f"data.train_files={data}",
            f"custom_reward_function.path={reward}",
            "algorithm.adv_estimator=grpo",
            f"data.train_batch_size={args.batch}",
            "data.max_prompt_length=128",
            f"data.max_response_length={args.response_length}",
            f"actor_rollout_ref.rollout.n={args.n}",
            "actor_rollout_ref.rollout.name=hf",
            "actor_rollout_ref.rollout.seed=1",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}",
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={args.batch * args.n}",
            "actor_rollout_ref.actor.optim.lr=3e-3",
            f"trainer.total_training_steps={args.steps}",
            "trainer.torch_threads=1",  # one core per process: the trainer, and the rollouter beside it
            "trainer.val_before_train=false",
            "trainer.save_freq=0",
            "trainer.logger=[file]",
            "trainer.export_hf=false",
            "trainer.plot=false",
            "trainer.report.enable=false",
            "trainer.resume_mode=disable",
            f"trainer.default_local_dir={out}",
            *MODES[mode],
        ]
    )
    trainer = build_ppo_trainer(cfg)
    trainer.init_workers()
    start = time.perf_counter()
    startup = 0.0
    if mode != "sync":
        trainer.start_rollouter()
        startup = time.perf_counter() - start
    stamps: list[float] = []
    trainer.step_hooks.append(lambda step, metrics: stamps.append(time.perf_counter()))
    trainer.fit()
    # to the last step's metrics row: the rollouter's shutdown after the run is not part of the work
    wall = stamps[-1] - start - startup
    rows = [json.loads(line)["metrics"] for line in Path(trainer.metrics_path).read_text().splitlines()]
    rows = [r for r in rows if "actor/pg_loss" in r]
    per_step = args.batch * args.n
    tokens = sum(r["response_length/mean"] * per_step for r in rows)
    return {
        "mode": mode,
        "steps": len(rows),
        "samples": len(rows) * per_step,
        "wall_s": wall,
        "rollouter_startup_s": startup,
        "response_tokens": tokens,
        "tokens_per_s": tokens / wall,
        "trainer_wait_for_rollouts_s": sum(r.get("timing_s/gen", 0.0) for r in rows),
        "update_s": sum(r.get("timing_s/update_actor", 0.0) for r in rows),
        "param_sync_s": sum(r.get("timing_s/param_sync", 0.0) for r in rows),
        "response_length_mean": sum(r["response_length/mean"] for r in rows) / len(rows),
        "response_length_max": max(r["response_length/max"] for r in rows),
        "final_score": sum(r["critic/score/mean"] for r in rows[-2:]) / len(rows[-2:]),
        "max_staleness": max(r.get("async/staleness/max", 0.0) for r in rows),
        "partial_rollout_interruptions": sum(r.get("async/partial_rollout_interruptions", 0.0) for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8, help="prompts per step")
    parser.add_argument("--n", type=int, default=2, help="responses per prompt")
    parser.add_argument("--response-length", type=int, default=256)
    parser.add_argument("--hazard", type=float, default=0.02, help="per-token EOS probability")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()

    from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_hazard_model(str(root / "model"), args.hazard)
        train, _ = generate_arithmetic_splits(train_size=args.batch * (args.steps + 2), test_size=2, seed=4)
        write_parquet(train, str(root / "train.parquet"))
        (root / "reward.py").write_text(REWARD)
        for mode in args.modes:
            res = run_mode(
                mode, str(root / "model"), str(root / "train.parquet"), str(root / "reward.py"), args, str(root / mode)
            )
            print(json.dumps(res), flush=True)
            results.append(res)
    base = next((r for r in results if r["mode"] == "sync"), results[0])
    for r in results:
        r["speedup_vs_sync"] = r["tokens_per_s"] / base["tokens_per_s"]
    header = [
        "mode",
        "samples",
        "wall s",
        "tokens/s",
        "x sync",
        "wait for rollouts s",
        "len mean",
        "len max",
        "final score",
        "max staleness",
    ]
    table = [
        [
            r["mode"],
            r["samples"],
            r["wall_s"],
            r["tokens_per_s"],
            r["speedup_vs_sync"],
            r["trainer_wait_for_rollouts_s"],
            r["response_length_mean"],
            r["response_length_max"],
            r["final_score"],
            r["max_staleness"],
        ]
        for r in results
    ]
    print(markdown_table(header, table))
    path = save_result("async_vs_sync", {"args": vars(args), "results": results}, smoke=args.smoke)
    print(f"saved {path}")


if __name__ == "__main__":
    main()
