#!/usr/bin/env bash
# GRPO on GSM8K. First: python examples/data_preprocess/gsm8k.py --local_save_dir ~/data/gsm8k (add --local_dataset_path DIR for a local copy)
set -euo pipefail
PY=${PYTHON:-python}
DATA=${DATA:-$HOME/data/gsm8k}
MODEL=${MODEL:-smollm2-135m-instruct}
$PY -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files=$DATA/train.parquet data.val_files=$DATA/test.parquet \
    data.max_prompt_length=512 data.max_response_length=512 data.train_batch_size=32 \
    actor_rollout_ref.model.path=$MODEL actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 actor_rollout_ref.actor.use_kl_loss=true \
    actor_rollout_ref.actor.kl_loss_coef=0.001 actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    trainer.experiment_name=gsm8k_grpo trainer.total_epochs=1 trainer.total_training_steps=null "$@"
