#!/usr/bin/env bash
# DAPO-style settings (Yu et al. 2025): clip-higher, token-mean, overlong penalty, dynamic sampling.
set -euo pipefail
PY=${PYTHON:-python}
$PY -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    actor_rollout_ref.actor.clip_ratio_low=0.2 actor_rollout_ref.actor.clip_ratio_high=0.28 \
    actor_rollout_ref.actor.loss_agg_mode=token-mean \
    reward_model.reward_manager=dapo reward_model.overlong_buffer.enable=true reward_model.overlong_buffer.len=4 \
    algorithm.filter_groups.enable=true algorithm.filter_groups.metric=acc algorithm.filter_groups.max_num_gen_batches=4 \
    actor_rollout_ref.rollout.n=8 trainer.experiment_name=arithmetic_dapo trainer.total_training_steps=50 "$@"
