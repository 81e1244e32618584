#!/usr/bin/env bash
# REINFORCE++ (Hu 2025): discounted returns, batch whitening, KL loss.
set -euo pipefail
PY=${PYTHON:-python}
$PY -m verl.trainer.main_ppo \
    algorithm.adv_estimator=reinforce_plus_plus actor_rollout_ref.actor.use_kl_loss=true \
    actor_rollout_ref.rollout.n=4 trainer.experiment_name=arithmetic_reinforce_pp trainer.total_training_steps=50 "$@"
