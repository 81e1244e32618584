#!/usr/bin/env bash
# PPO with an adaptive KL penalty in the reward, the deprecated scheduler name (warmup_style) on the critic and
# hybrid-sharded critic (verl: examples/ppo_trainer/*_kl* style).
set -x
PYTHON=${PYTHON:-python3}

$PYTHON -m verl.trainer.main_ppo \
    algorithm.adv_estimator=gae \
    algorithm.use_kl_in_reward=True \
    algorithm.kl_penalty=kl \
    algorithm.kl_ctrl.type=adaptive \
    algorithm.kl_ctrl.kl_coef=0.001 \
    algorithm.kl_ctrl.target_kl=0.1 \
    algorithm.kl_ctrl.horizon=10000 \
    algorithm.gamma=1.0 \
    algorithm.lam=0.95 \
    data.train_files=$HOME/data/gsm8k/train.parquet \
    data.val_files=$HOME/data/gsm8k/test.parquet \
    data.train_batch_size=256 \
    data.max_prompt_length=512 \
    data.max_response_length=512 \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=64 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.actor.ppo_epochs=2 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16 \
    critic.model.path=Qwen/Qwen2.5-0.5B-Instruct \
    critic.optim.lr=1e-5 \
    critic.optim.warmup_style=cosine \
    critic.optim.lr_warmup_steps_ratio=0.1 \
    critic.ppo_micro_batch_size_per_gpu=8 \
    critic.cliprange_value=0.5 \
    critic.model.fsdp_config.fsdp_size=4 \
    critic.model.fsdp_config.reshard_after_forward=False \
    trainer.critic_warmup=2 \
    trainer.logger='["console","tensorboard"]' \
    trainer.project_name='verl_example_gsm8k' \
    trainer.experiment_name='qwen2_5_0_5b_ppo_adaptive_kl' \
    trainer.n_gpus_per_node=8 \
    trainer.nnodes=1 \
    trainer.total_epochs=5 "$@"
