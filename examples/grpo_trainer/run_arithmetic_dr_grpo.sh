#!/usr/bin/env bash
# Dr. GRPO (Liu et al. 2025): no std normalisation, token-sum loss normalised by the max length.
set -euo pipefail
PY=${PYTHON:-python}
$PY -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo algorithm.norm_adv_by_std_in_grpo=false \
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm \
    trainer.experiment_name=arithmetic_dr_grpo trainer.total_training_steps=50 "$@"
