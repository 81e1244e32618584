#!/usr/bin/env bash
# DPO on the arithmetic task. First: python examples/data_preprocess/arithmetic_offline.py --local_dir $DATA
set -euo pipefail
PY=${PYTHON:-python}
DATA=${DATA:-$HOME/data/arithmetic_offline}
$PY -m verl.trainer.main_dpo \
    data.train_files=$DATA/dpo_train.parquet data.val_files=$DATA/dpo_test.parquet \
    trainer.experiment_name=arithmetic_dpo "$@"
