#!/usr/bin/env bash
# RLOO (Ahmadian et al. 2024): leave-one-out baseline, KL in the reward.
set -euo pipefail
PY=${PYTHON:-python}
$PY -m verl.trainer.main_ppo \
    algorithm.adv_estimator=rloo algorithm.use_kl_in_reward=true algorithm.kl_ctrl.kl_coef=0.001 \
    actor_rollout_ref.rollout.n=4 trainer.experiment_name=arithmetic_rloo trainer.total_training_steps=50 "$@"
