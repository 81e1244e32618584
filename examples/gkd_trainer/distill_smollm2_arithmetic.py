"""On-policy distillation proof: a SmolLM2-135M-Instruct with layers dropped (the student) is distilled from the
full bundled model (the teacher) with GKD on the arithmetic task, and closes part of the gap on held-out problems.

    python examples/gkd_trainer/distill_smollm2_arithmetic.py --out /tmp/gkd_proof   # layers 14, 15 dropped, 80 steps
    python examples/gkd_trainer/distill_smollm2_arithmetic.py --smoke --out /tmp/gkd_smoke   # tiny models (CI)

Greedy accuracy (the arithmetic rule scorer) of the teacher, of the student before and after, on ``--eval_size``
held-out problems, and the wall times, are printed and written to ``<out>/result.json``. See
docs/judge_and_distillation.md for the recorded figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from verl.api.data import encode_prompts  # noqa: E402
from verl.data.arithmetic_task import ArithmeticTaskConfig, generate_arithmetic_splits  # noqa: E402
from verl.models.loader import load_causal_lm, load_tokenizer, resolve_model_path  # noqa: E402
from verl.rewards.arithmetic import compute_score  # noqa: E402
from verl.trainer.offline.gkd import GKDTrainer  # noqa: E402
from verl.workers.rollout.hf_rollout import HFRollout  # noqa: E402


def drop_layers(model: torch.nn.Module, n_drop: int = 0, indices: list[int] | None = None) -> torch.nn.Module:
    """Remove decoder layers: the given ``indices``, else ``n_drop`` layers spread evenly over the middle of the
    stack (first and last kept)."""
    layers = model.model.layers
    n = len(layers)
    if indices:
        bad = [i for i in indices if not 0 < i < n - 1]
        if bad:
            raise ValueError(f"--drop_indices must lie in [1, {n - 2}] (first and last layers kept), got {bad}")
        drop = set(indices)
    else:
        if not 0 <= n_drop < n - 1:
            raise ValueError(f"--drop_layers must be in [0, {n - 2}], got {n_drop}")
        step = (n - 2) / max(n_drop, 1)
        drop = {1 + int(i * step) for i in range(n_drop)}
    kept = [layer for i, layer in enumerate(layers) if i not in drop]
    for new_index, layer in enumerate(kept):  # the attention cache is indexed by layer_idx
        layer.self_attn.layer_idx = new_index
    model.model.layers = torch.nn.ModuleList(kept)
    model.config.num_hidden_layers = len(kept)
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = [model.config.layer_types[i] for i in range(n) if i not in drop]
    return model


def accuracy(model: torch.nn.Module, tokenizer: Any, rows: list[dict[str, Any]], max_new_tokens: int = 16) -> float:
    """Greedy accuracy of ``model`` on arithmetic ``rows`` (chat prompts), scored by the rule scorer."""
    rollout = HFRollout(model, {"response_length": max_new_tokens, "do_sample": False, "max_num_seqs": 32}, tokenizer)
    prompts = encode_prompts([r["prompt"] for r in rows], tokenizer)
    out = rollout.generate_sequences(prompts)
    texts = [
        tokenizer.decode(r[m.bool()].tolist(), skip_special_tokens=True)
        for r, m in zip(out.batch["responses"], out.batch["response_mask"])
    ]
    return sum(compute_score(t, r["reward_model"]["ground_truth"]) for t, r in zip(texts, rows)) / len(rows)


def training_curve(metrics_path: str, keys: tuple[str, ...] = ("distill/reverse_kl", "loss")) -> dict[str, Any]:
    """Mean of each of ``keys`` over the first and the last quarter of the logged steps (per-step values are noisy)."""
    with open(metrics_path) as f:
        rows = [json.loads(line).get("metrics", {}) for line in f if line.strip()]
    rows = [r for r in rows if any(k in r for k in keys)]
    quarter = max(len(rows) // 4, 1)
    curve: dict[str, Any] = {"steps_logged": len(rows)}
    for key in keys:
        values = [float(r[key]) for r in rows if key in r]
        if values:
            curve[key] = {"first_quarter": sum(values[:quarter]) / len(values[:quarter]),
                          "last_quarter": sum(values[-quarter:]) / len(values[-quarter:])}  # fmt: skip
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", default="smollm2-135m-instruct")
    parser.add_argument("--drop_indices", default="14,15", help="comma-separated decoder layers to drop ('': use N)")
    parser.add_argument("--drop_layers", type=int, default=2, help="N layers spread over the middle (if no indices)")
    parser.add_argument("--max_value", type=int, default=20, help="operands of the addition problems: 0..max_value")
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--beta", type=float, default=0.5)
    parser.add_argument("--lmbda", type=float, default=1.0)
    parser.add_argument("--max_new_tokens", type=int, default=8, help="length of the student's on-policy samples")
    parser.add_argument("--train_size", type=int, default=300)
    parser.add_argument("--eval_size", type=int, default=128)
    parser.add_argument("--out", default="outputs/gkd_proof")
    parser.add_argument("--smoke", action="store_true", help="tiny random models, 2 steps, 8 problems")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    if args.smoke:
        from verl.models.tiny import TinyModelSpec, make_tiny_model_dir

        args.teacher = make_tiny_model_dir(os.path.join(args.out, "teacher"), TinyModelSpec(num_hidden_layers=3))
        args.drop_layers, args.steps, args.train_size, args.eval_size, args.batch_size = 1, 2, 8, 8, 4
        args.drop_indices = ""
    task = ArithmeticTaskConfig(max_value=args.max_value)
    train, test = generate_arithmetic_splits(args.train_size, args.eval_size, seed=0, task=task)
    drop_indices = [int(i) for i in args.drop_indices.split(",") if i.strip()]
    teacher_path = resolve_model_path(args.teacher)
    tokenizer = load_tokenizer(teacher_path)
    t0 = time.perf_counter()
    teacher = load_causal_lm(teacher_path, dtype=torch.float32).eval()
    result: dict[str, Any] = {"args": vars(args), "teacher_accuracy": accuracy(teacher, tokenizer, test)}
    student_dir = os.path.join(args.out, "student_init")
    student = drop_layers(load_causal_lm(teacher_path, dtype=torch.float32), args.drop_layers, drop_indices)
    student.save_pretrained(student_dir)
    tokenizer.save_pretrained(student_dir)
    result["student_layers"] = student.config.num_hidden_layers
    result["student_accuracy_before"] = accuracy(student.eval(), tokenizer, test)
    result["eval_s"] = time.perf_counter() - t0
    print(json.dumps(result), flush=True)

    rows = [{"prompt": r["prompt"], "response": r["reward_model"]["ground_truth"]} for r in train]
    trainer = GKDTrainer(
        student_dir,
        teacher=teacher,
        tokenizer=tokenizer,
        dataset=rows,
        max_length=128,
        config={
            "gkd.lmbda": args.lmbda,
            "gkd.beta": args.beta,
            "gkd.temperature": 1.0,
            "gkd.max_new_tokens": args.max_new_tokens,
            "model.dtype": "float32",
            "trainer.logger": ["file"],
            "trainer.export_hf": False,
            "trainer.plot": False,
            "trainer.report.enable": False,
            "trainer.device": "cpu",
        },
    )
    t1 = time.perf_counter()
    metrics = trainer.train(
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        output_dir=os.path.join(args.out, "run"),
    )
    result["train_s"] = time.perf_counter() - t1
    result["final_train_metrics"] = {k: v for k, v in metrics.items() if isinstance(v, float)}
    result["training_curve"] = training_curve(os.path.join(args.out, "run", "logs", "metrics.jsonl"))
    result["student_accuracy_after"] = accuracy(trainer.model.eval(), tokenizer, test)
    gap = result["teacher_accuracy"] - result["student_accuracy_before"]
    result["gap_closed"] = (result["student_accuracy_after"] - result["student_accuracy_before"]) / gap if gap else None
    print(json.dumps(result), flush=True)
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
