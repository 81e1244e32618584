"""The two sides of the GRPO benchmark, built to do identical work.

verl: the product path of ``python -m verl.trainer.main_ppo`` (``load_config`` -> ``RayPPOTrainer`` on the local
backend -> ``train_step`` per step). TRL: ``GRPOTrainer`` with the settings that match (same model files, prompts,
group size, generated tokens, precision, KL coefficient, reward function, optimizer, clipping).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from bench._common import TOY_REWARD_FILE, default_device, write_prompt_parquet


@dataclass
class GRPOWork:
    """What one optimizer step does, on both sides."""

    model_path: str
    prompts: list[str]
    batch_prompts: int = 8  # B
    group_size: int = 8  # G
    response_length: int = 64  # exactly: min_new_tokens = max_new_tokens
    prompt_length: int = 32
    beta: float = 0.0  # KL-to-reference coefficient (in the loss, k3 estimator, on both sides)
    dtype: str = "float32"  # float32 | bfloat16 (autocast; master weights stay fp32)
    trl_gradient_checkpointing: bool = False  # TRL 1.16's default is on; off is the same work as our side
    lr: float = 1e-6
    engine: str = "hf"  # our rollout engine
    seed: int = 0
    extra_overrides: list[str] = field(default_factory=list)


def verl_overrides(work: GRPOWork, data_file: str, out_dir: str) -> list[str]:
    """The ``key=value`` overrides that make ``main_ppo``'s config do ``work``."""
    seqs = work.batch_prompts * work.group_size
    dtype = work.dtype
    overrides = [
        f"actor_rollout_ref.model.path={work.model_path}",
        f"data.train_files={data_file}",
        f"data.val_files={data_file}",
        f"data.max_prompt_length={work.prompt_length}",
        f"data.max_response_length={work.response_length}",
        f"data.train_batch_size={work.batch_prompts}",
        "data.apply_chat_template=false",
        "data.shuffle=true",
        f"actor_rollout_ref.rollout.name={work.engine}",
        f"actor_rollout_ref.rollout.n={work.group_size}",
        f"actor_rollout_ref.rollout.min_new_tokens={work.response_length}",
        f"actor_rollout_ref.rollout.dtype={dtype}",
        "actor_rollout_ref.rollout.temperature=1.0",
        f"actor_rollout_ref.rollout.max_num_seqs={seqs}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={seqs}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={seqs}",
        f"actor_rollout_ref.actor.dtype={dtype}",
        # one optimizer step per rollout batch, one forward/backward over all sequences (TRL: B*G per device)
        f"actor_rollout_ref.actor.ppo_mini_batch_size={work.batch_prompts}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={seqs}",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        "actor_rollout_ref.actor.clip_ratio=0.2",
        f"actor_rollout_ref.actor.optim.lr={work.lr}",
        f"actor_rollout_ref.actor.use_kl_loss={'true' if work.beta > 0 else 'false'}",
        f"actor_rollout_ref.actor.kl_loss_coef={work.beta}",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "algorithm.adv_estimator=grpo",
        "algorithm.norm_adv_by_std_in_grpo=true",
        "algorithm.use_kl_in_reward=false",
        f"custom_reward_function.path={TOY_REWARD_FILE}",
        "custom_reward_function.name=compute_score",
        "trainer.logger=[]",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=0",
        "trainer.total_training_steps=100000",
        "trainer.export_hf=false",
        "trainer.plot=false",
        f"trainer.seed={work.seed}",
        f"trainer.torch_threads={torch.get_num_threads()}",
        f"trainer.default_local_dir={out_dir}",
    ]
    return overrides + list(work.extra_overrides)


class VerlSide:
    """Our GRPO trainer on the local backend; ``step()`` runs one full ``train_step`` on the next prompt batch."""

    name = "verl"

    def __init__(self, work: GRPOWork, out_dir: str | None = None) -> None:
        from verl.models.loader import load_tokenizer
        from verl.protocol import DataProto
        from verl.trainer.config import load_config
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer
        from verl.trainer.ppo.reward import load_reward_manager
        from verl.trainer.ppo.runner import apply_runtime_switches, build_datasets, seed_everything

        out_dir = out_dir or tempfile.mkdtemp(prefix="verl_bench_run_")
        data_file = write_prompt_parquet(os.path.join(out_dir, "prompts.parquet"), work.prompts)
        self.config = load_config(verl_overrides(work, data_file, out_dir))
        seed_everything(work.seed)
        apply_runtime_switches(self.config.trainer)
        tokenizer = load_tokenizer(work.model_path)
        train_dataset, val_dataset, sampler = build_datasets(self.config, tokenizer)
        self.trainer = RayPPOTrainer(
            config=self.config,
            tokenizer=tokenizer,
            reward_fn=load_reward_manager(self.config, tokenizer, num_examine=0),
            val_reward_fn=None,
            train_dataset=train_dataset,
            val_dataset=None,
            train_sampler=sampler,
        )
        self.trainer.init_workers()
        self._to_proto = DataProto.from_single_dict
        self._iter = None
        self.last_metrics: dict[str, float] = {}

    def _next_batch(self):
        while True:
            if self._iter is None:
                self._iter = iter(self.trainer.train_dataloader)
            try:
                return self._to_proto(next(self._iter))
            except StopIteration:
                self._iter = None

    def step(self) -> dict[str, float]:
        """One optimizer step: fetch prompts, generate, reward, log-probs, advantages, update."""
        self.last_metrics = self.trainer.step(self._next_batch())
        return self.last_metrics

    @property
    def module(self) -> torch.nn.Module:
        return self.trainer.actor_rollout_wg.workers[0].actor_module  # local backend: one worker


def build_trl_trainer(work: GRPOWork, callbacks: list[Any], max_steps: int, out_dir: str | None = None):
    """TRL's ``GRPOTrainer`` configured for ``work``; ``trainer.train()`` runs ``max_steps`` optimizer steps."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from bench.toy_reward import trl_reward
    from verl.models.loader import load_tokenizer

    out_dir = out_dir or tempfile.mkdtemp(prefix="trl_bench_run_")
    seqs = work.batch_prompts * work.group_size
    bf16 = work.dtype in ("bfloat16", "bf16")
    args = GRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=seqs,
        gradient_accumulation_steps=1,
        num_generations=work.group_size,
        num_iterations=1,
        max_completion_length=work.response_length,
        generation_kwargs={"min_new_tokens": work.response_length},
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=work.beta,
        epsilon=0.2,
        loss_type="dapo",  # token-mean over the batch, as verl's token-mean
        scale_rewards="group",
        learning_rate=work.lr,
        lr_scheduler_type="constant",
        max_grad_norm=1.0,
        weight_decay=0.0,
        bf16=bf16,
        fp16=False,
        gradient_checkpointing=work.trl_gradient_checkpointing,
        # fp32 master weights as on our side; bf16 only through autocast
        model_init_kwargs={"dtype": torch.float32},
        use_cpu=default_device() == "cpu",
        max_steps=max_steps,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=work.seed,
        use_vllm=False,
    )
    tokenizer = load_tokenizer(work.model_path)
    tokenizer.padding_side = "left"
    dataset = Dataset.from_dict({"prompt": list(work.prompts)})
    return GRPOTrainer(
        model=work.model_path,
        reward_funcs=trl_reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=callbacks,
    )


def alternate_in_trl_loop(
    work: GRPOWork,
    ours: VerlSide,
    warmup: int,
    steps: int,
    on_pair: Callable[[int, dict[str, float]], None] | None = None,
) -> dict[str, list[float]]:
    """Run TRL's training loop and, after each TRL optimizer step, one of ours: A/B alternated step by step in the
    same process with the same threads. Returns ``{"verl_s", "trl_s", "verl_cpu_s", "trl_cpu_s"}`` for the steps
    after ``warmup``.

    Wall seconds: TRL's step from the end of our previous step to TRL's ``on_step_end`` (data loading, generation,
    reward, log-probs, loss, backward, optimizer step, logging); ours around ``VerlSide.step``. CPU seconds: the
    process's user+system time over the same intervals (``time.process_time``). On a machine whose cores are shared
    with other jobs, wall time includes waiting for a core while CPU time counts only the work done, so the CPU
    ratio is the steadier comparison (both sides run the same number of threads).
    """
    import time

    from transformers import TrainerCallback

    out: dict[str, list[float]] = {"verl_s": [], "trl_s": [], "verl_cpu_s": [], "trl_cpu_s": []}
    state: dict[str, Any] = {"t0": None, "c0": None, "i": 0}

    def sync() -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    class Alternate(TrainerCallback):
        def on_train_begin(self, args, trainer_state, control, **kwargs):
            state["t0"], state["c0"] = time.perf_counter(), time.process_time()

        def on_step_end(self, args, trainer_state, control, **kwargs):
            sync()
            pair = {"trl_s": time.perf_counter() - state["t0"], "trl_cpu_s": time.process_time() - state["c0"]}
            start, cpu_start = time.perf_counter(), time.process_time()
            ours.step()
            sync()
            pair["verl_s"] = time.perf_counter() - start
            pair["verl_cpu_s"] = time.process_time() - cpu_start
            i = state["i"]
            state["i"] += 1
            if i >= warmup:
                for key, value in pair.items():
                    out[key].append(value)
            if on_pair is not None:
                on_pair(i, pair)
            state["t0"], state["c0"] = time.perf_counter(), time.process_time()

    trainer = build_trl_trainer(work, [Alternate()], max_steps=warmup + steps)
    trainer.train()
    return out
