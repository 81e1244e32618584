#!/usr/bin/env bash
# PPO with a critic (GAE) on the bundled arithmetic task.
set -euo pipefail
PY=${PYTHON:-python}
$PY -m verl.trainer.main_ppo \
    algorithm.adv_estimator=gae algorithm.gamma=1.0 algorithm.lam=0.95 \
    actor_rollout_ref.rollout.n=1 data.train_batch_size=32 actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 critic.optim.lr=1e-5 critic.ppo_micro_batch_size_per_gpu=16 \
    trainer.experiment_name=arithmetic_ppo trainer.total_training_steps=50 "$@"
