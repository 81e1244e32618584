#!/usr/bin/env bash
# GRPO on GSM8K written the way verl v0.9 scripts are (parameter arrays, model_engine, engine-section keys, the
# performance keys); docs/porting_from_verl.md "verl v0.9 keys" says what each does here.
set -x
PYTHON=${PYTHON:-python3}
sp_size=${SP_SIZE:-2}

DATA=(
    algorithm.adv_estimator=grpo
    data.train_files="['$HOME/data/gsm8k/train.parquet']"
    data.val_files="['$HOME/data/gsm8k/test.parquet']"
    data.train_batch_size=256
    data.max_prompt_length=512
    data.max_response_length=1024
    data.trust_remote_code=False
)

MODEL=(
    actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct
    actor_rollout_ref.model.use_remove_padding=True
    actor_rollout_ref.model.enable_gradient_checkpointing=True
    actor_rollout_ref.model.use_fused_kernels=True
    actor_rollout_ref.model.fused_kernel_options.impl_backend=torch
)

ACTOR=(
    actor_rollout_ref.actor.optim.lr=1e-6
    actor_rollout_ref.actor.ppo_mini_batch_size=64
    actor_rollout_ref.actor.use_dynamic_bsz=True
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384
    actor_rollout_ref.actor.use_kl_loss=True
    actor_rollout_ref.actor.kl_loss_coef=0.001
    actor_rollout_ref.actor.entropy_from_logits_with_chunking=True
    actor_rollout_ref.actor.fsdp_config.entropy_checkpointing=True
    actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=${sp_size}
    actor_rollout_ref.actor.fsdp_config.forward_prefetch=True
    actor_rollout_ref.actor.fsdp_config.offload_policy=False
    actor_rollout_ref.actor.fsdp_config.model_dtype=fp32
)

ROLLOUT=(
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.n=5
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6
    actor_rollout_ref.rollout.ignore_eos=False
    actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=4096
    actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True
)

REF=(
    actor_rollout_ref.ref.strategy=fsdp2
    actor_rollout_ref.ref.use_torch_compile=False
    actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size=${sp_size}
    actor_rollout_ref.ref.fsdp_config.param_offload=True
    actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True
)

TRAINER=(
    model_engine=fsdp
    actor_rollout_ref.nccl_timeout=3600
    trainer.logger='["console","tensorboard"]'
    trainer.project_name=verl_grpo_example_gsm8k
    trainer.experiment_name=qwen2_5_0_5b_v09_keys
    trainer.n_gpus_per_node=8
    trainer.nnodes=1
    trainer.save_freq=20
    trainer.test_freq=5
    trainer.total_epochs=15
)

$PYTHON -m verl.trainer.main_ppo "${DATA[@]}" "${MODEL[@]}" "${ACTOR[@]}" "${ROLLOUT[@]}" "${REF[@]}" "${TRAINER[@]}" "$@"
