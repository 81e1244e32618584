#!/usr/bin/env bash
# ReMax (Li et al. 2023): the greedy response's reward is the baseline.
set -euo pipefail
PY=${PYTHON:-python}
$PY -m verl.trainer.main_ppo \
    algorithm.adv_estimator=remax actor_rollout_ref.rollout.n=2 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
    trainer.experiment_name=arithmetic_remax trainer.total_training_steps=50 "$@"
