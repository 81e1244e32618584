#!/usr/bin/env bash
# GRPO on the bundled arithmetic task with the bundled SmolLM2-135M-Instruct (CPU). Extra key=value args override.
set -euo pipefail
PY=${PYTHON:-python}
$PY -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files=bundled://arithmetic/train.parquet data.val_files=bundled://arithmetic/test.parquet \
    data.train_batch_size=16 actor_rollout_ref.rollout.n=4 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 actor_rollout_ref.actor.optim.lr=1e-5 \
    trainer.experiment_name=arithmetic_grpo trainer.total_training_steps=50 trainer.test_freq=10 "$@"
