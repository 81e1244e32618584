#!/usr/bin/env bash
# GKD (on-policy distillation) on the arithmetic task: the student (model.path) learns from the teacher on its own
# samples. First: python examples/data_preprocess/arithmetic_offline.py --local_dir $DATA
set -euo pipefail
PY=${PYTHON:-python}
DATA=${DATA:-$HOME/data/arithmetic_offline}
$PY -m verl.trainer.main_gkd \
    data.train_files=$DATA/sft_train.parquet data.val_files=$DATA/sft_test.parquet \
    teacher.path=${TEACHER:-smollm2-135m-instruct} \
    gkd.lmbda=1.0 gkd.beta=0.5 gkd.max_new_tokens=16 \
    trainer.experiment_name=arithmetic_gkd "$@"
