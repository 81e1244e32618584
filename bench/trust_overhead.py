"""What the run-time invariants of docs/trust.md cost: time per step with each on and off, on the config-S model.

Measured:

1. the weight digest itself: milliseconds per million parameters (fp32 and bf16) and for a 135M-parameter model's
   worth of tensors (the digest is linear in the weights; this is the number that scales);
2. synchronous GRPO (hf engine, ``rollout.calculate_log_probs=true``): fastest ``timing_s/step`` over steps 2..N with
   ``trainer.check_policy_version`` and ``trainer.log_prob_gap`` on (the default) and off, and the two checks
   alone on a batch of 1024 x 1024 tokens;
3. one-step-off GRPO (a rollout process, gloo pushes): fastest ``timing_s/param_sync`` and ``timing_s/step`` with
   ``actor_rollout_ref.rollout.check_weight_sync`` on and off;
4. colocated vLLM (when installed): one weight sync into the engine with the read-back check on and off (fastest).

Step times on a machine shared with other work vary by 3x from step to step; the direct costs (1 and the two
checks alone) are the figures that do not depend on the load.

The variants alternate (on, off, on, off, ...) so that load from other processes hits both alike. Results:
``bench/results/trust_overhead_<machine>.json``.

    python bench/trust_overhead.py                  # about 5 minutes on 2 idle CPU cores
    python bench/trust_overhead.py --smoke          # a quick check of the script
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import make_config_s_dir, markdown_table, save_result  # noqa: E402

REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return sum(ch.isdigit() for ch in solution_str) / max(len(solution_str), 1)
"""

SYNC_OFF = ["trainer.check_policy_version=false", "trainer.log_prob_gap=false"]
ASYNC_OFF = ["actor_rollout_ref.rollout.check_weight_sync=false"]


def digest_speed(repeats: int) -> dict[str, float]:
    """ms per million parameters of :func:`tensor_digest`, fp32 and bf16, over 8 MB-ish tensors."""
    import torch

    from verl.workers.rollout.weight_digest import tensor_digest

    out: dict[str, float] = {}
    tensors32 = [torch.randn(2048, 1024) for _ in range(16)]  # 33.5M parameters
    params = sum(t.numel() for t in tensors32)
    for dtype in (torch.float32, torch.bfloat16):
        tensors = [t.to(dtype) for t in tensors32]
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            for t in tensors:
                tensor_digest(t)
            times.append(time.perf_counter() - start)
        per_m = min(times) / params * 1e6 * 1e3  # the best of the repeats: other load only adds
        name = str(dtype).removeprefix("torch.")
        out[f"ms_per_million_params_{name}"] = per_m
        out[f"s_for_135M_params_{name}"] = per_m * 135 / 1e3
    return out


def check_costs(repeats: int) -> dict[str, float]:
    """Seconds of the per-step checks on a batch of 1024 responses x 1024 tokens: the policy-version check and the
    log-prob gap sums (best of ``repeats``)."""
    import numpy as np
    import torch

    from verl.algorithms.rollout_correction import LogProbGapSums
    from verl.protocol import DataProto
    from verl.trainer.ppo.invariants import PolicyVersions, stamp_policy_version

    rows, tokens = 1024, 1024
    batch = DataProto.from_dict({"x": torch.zeros(rows, 1)})
    stamp_policy_version(batch, np.full(rows, 6))

    versions = PolicyVersions(check=True, log_prob_gap=False)  # the synchronous driver at step 7 holds version 6

    trainer_lp, rollout_lp = -torch.rand(rows, tokens), -torch.rand(rows, tokens)
    mask = torch.ones(rows, tokens)
    best = {"policy_version_check_s": float("inf"), "log_prob_gap_s": float("inf")}
    for _ in range(repeats):
        start = time.perf_counter()
        versions.check_consumed(batch, current=6, bound=(0, "synchronous training"), step=7)
        best["policy_version_check_s"] = min(best["policy_version_check_s"], time.perf_counter() - start)
        start = time.perf_counter()
        LogProbGapSums().add(trainer_lp, rollout_lp, mask)
        best["log_prob_gap_s"] = min(best["log_prob_gap_s"], time.perf_counter() - start)
    return best


def _config(model: str, data: str, reward: str, out: str, steps: int, extra: list[str]):
    from verl.trainer.config import load_config

    return load_config(
        [
            f"actor_rollout_ref.model.path={model}",
            f"data.train_files={data}",
            f"custom_reward_function.path={reward}",
            "algorithm.adv_estimator=grpo",
            "data.train_batch_size=4",
            "data.max_prompt_length=128",
            "data.max_response_length=16",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.name=hf",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "actor_rollout_ref.rollout.seed=3",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            f"trainer.total_training_steps={steps}",
            "trainer.val_before_train=false",
            "trainer.save_freq=0",
            "trainer.logger=[file]",
            "trainer.export_hf=false",
            "trainer.plot=false",
            "trainer.report.enable=false",
            "trainer.resume_mode=disable",
            f"trainer.default_local_dir={out}",
            *extra,
        ]
    )


def _run(cfg) -> list[dict]:
    from verl.trainer.ppo.runner import build_ppo_trainer

    trainer = build_ppo_trainer(cfg)
    trainer.init_workers()
    trainer.fit()
    rows = [json.loads(line) for line in Path(trainer.metrics_path).read_text().splitlines()]
    return [r["metrics"] for r in rows if "timing_s/step" in r.get("metrics", {})]


class CheckTimer:
    """Seconds spent inside the invariant checks of this process (the bench wraps them; nothing else changes)."""

    def __init__(self) -> None:
        import verl.workers.rollout.weight_digest as digest
        from verl.algorithms.rollout_correction import LogProbGapSums
        from verl.trainer.ppo.invariants import LogProbGapWatch, PolicyVersions

        self.seconds = 0.0
        self._patched = []
        for owner, name in (
            (PolicyVersions, "check_consumed"),
            (LogProbGapSums, "add"),
            (LogProbGapWatch, "observe"),
            (digest, "tensor_digest"),
            (digest, "check_push_report"),
        ):
            self._wrap(owner, name)

    def _wrap(self, owner, name: str) -> None:
        real = getattr(owner, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        setattr(owner, name, timed)
        self._patched.append((owner, name, real))

    def close(self) -> None:
        for owner, name, real in self._patched:
            setattr(owner, name, real)


def trainer_runs(model, data, reward, steps, repeats, mode_extra, off_extra, keys) -> dict[str, dict[str, float]]:
    """Fastest and median of each of ``keys`` over steps 2..N, per variant (``on``/``off``), runs alternating. On a
    machine shared with other work the fastest step is the figure to compare (other load only adds time)."""
    samples: dict[str, dict[str, list[float]]] = {"on": {k: [] for k in keys}, "off": {k: [] for k in keys}}
    checks: list[float] = []  # seconds per step inside the checks (this process), per "on" run
    for i in range(repeats):
        for variant in ("on", "off"):
            extra = mode_extra + (off_extra if variant == "off" else [])
            timer = CheckTimer() if variant == "on" else None
            with tempfile.TemporaryDirectory() as out:
                try:
                    rows = _run(_config(model, data, reward, out, steps, extra))
                finally:
                    if timer is not None:
                        timer.close()
            if timer is not None:
                checks.append(timer.seconds / max(len(rows), 1))
            for key in keys:
                samples[variant][key] += [float(r[key]) for r in rows[1:] if key in r]
            got = ", ".join(f"{k}={min(samples[variant][k]):.3f}" for k in keys if samples[variant][k])
            print(f"  {variant} run {i + 1}: fastest {got}", flush=True)
    out: dict[str, dict[str, float]] = {}
    for variant, per_key in samples.items():
        out[variant] = {}
        for key, values in per_key.items():
            out[variant][key] = min(values) if values else float("nan")
            out[variant][f"{key} median"] = statistics.median(values) if values else float("nan")
    out["on"]["checks_s_per_step"] = min(checks) if checks else float("nan")
    return out


def vllm_sync(model: str, repeats: int) -> dict[str, float] | None:
    """Seconds of one colocated weight sync into a vLLM engine, check on and off (median of ``repeats``)."""
    if importlib.util.find_spec("vllm") is None:
        return None
    from omegaconf import OmegaConf
    from transformers import AutoModelForCausalLM

    from verl.workers.rollout.vllm_rollout import vLLMRollout
    from verl.workers.rollout_engine import RolloutEngineMixin

    hf = AutoModelForCausalLM.from_pretrained(model)
    cfg = OmegaConf.create(
        dict(name="vllm", temperature=1.0, top_p=1.0, top_k=-1, do_sample=True, prompt_length=8, response_length=8,
             min_new_tokens=0, dtype="float32", max_num_seqs=8, calculate_log_probs=True, enforce_eager=True,
             free_cache_engine=False, seed=0,
             val_kwargs=dict(do_sample=False, temperature=0.0, top_p=1.0, top_k=-1, n=1))
    )  # fmt: skip
    engine = vLLMRollout(model, cfg)

    class Worker(RolloutEngineMixin):
        def __init__(self, check: bool) -> None:
            self.rollout, self.rollout_name, self.rank = engine, "vllm", 0
            self.config = OmegaConf.create({"rollout": {"check_weight_sync": check, "tensor_model_parallel_size": 1}})

        def _rollout_weights(self):
            return iter(list(hf.state_dict().items()))

    times: dict[str, list[float]] = {"on": [], "off": []}
    try:
        for _ in range(repeats):
            for variant in ("on", "off"):
                worker = Worker(variant == "on")
                start = time.perf_counter()
                worker._sync_rollout_weights()
                times[variant].append(time.perf_counter() - start)
    finally:
        engine.shutdown()
    return {f"sync_s_{v}": min(t) for v, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--direct-only", action="store_true", help="only the digest speed, the checks and vLLM")
    args = parser.parse_args()
    steps, repeats = (3, 1) if args.smoke else (args.steps, args.repeats)

    from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet

    root = Path(tempfile.mkdtemp(prefix="verl_trust_"))
    model = make_config_s_dir(str(root / "model"))
    train, _ = generate_arithmetic_splits(train_size=8 * (steps + 2), test_size=2, seed=5)
    data = str(root / "train.parquet")
    write_parquet(train, data)
    reward = root / "reward.py"
    reward.write_text(REWARD)

    result: dict = {"steps": steps, "repeats": repeats, "model": "config S (4.3M parameters, fp32 on CPU)"}
    print("digest speed", flush=True)
    result["digest"] = digest_speed(3 if args.smoke else 7)
    result["checks"] = check_costs(3 if args.smoke else 7)
    if not args.direct_only:
        print("synchronous GRPO: policy version + log-prob gap on/off", flush=True)
        result["sync"] = trainer_runs(model, data, str(reward), steps, repeats, [], SYNC_OFF, ["timing_s/step"])
        print("one-step-off GRPO: weight-sync digest on/off", flush=True)
        keys = ["timing_s/step", "timing_s/param_sync"]
        mode = ["async_training.mode=one_step_off", "async_training.use_rollout_log_probs=true"]
        result["one_step_off"] = trainer_runs(model, data, str(reward), steps, repeats, mode, ASYNC_OFF, keys)
    print("colocated vLLM weight sync: check on/off", flush=True)
    result["vllm_sync"] = vllm_sync(model, 3 if args.smoke else 7)

    rows = []
    if not args.direct_only:
        sync, osop = result["sync"], result["one_step_off"]
        rows += [
            ["sync GRPO step, fastest (s)", sync["on"]["timing_s/step"], sync["off"]["timing_s/step"]],
            ["sync GRPO: inside the checks per step (s)", sync["on"]["checks_s_per_step"], 0.0],
            ["one-step-off step, fastest (s)", osop["on"]["timing_s/step"], osop["off"]["timing_s/step"]],
            [
                "one-step-off param sync, fastest (s)",
                osop["on"]["timing_s/param_sync"],
                osop["off"]["timing_s/param_sync"],
            ],
            ["one-step-off: inside the checks per step (s)", osop["on"]["checks_s_per_step"], 0.0],
        ]
    if result["vllm_sync"]:
        rows.append(["colocated vLLM sync (s)", result["vllm_sync"]["sync_s_on"], result["vllm_sync"]["sync_s_off"]])
    print(markdown_table(["measure", "invariants on", "off"], rows))
    print(json.dumps({**result["digest"], **result["checks"]}, indent=1))
    print("saved", save_result("trust_overhead", result, smoke=args.smoke, per_machine=True))


if __name__ == "__main__":
    main()
