#!/usr/bin/env bash
# SFT on the arithmetic task. First: python examples/data_preprocess/arithmetic_offline.py --local_dir $DATA
set -euo pipefail
PY=${PYTHON:-python}
DATA=${DATA:-$HOME/data/arithmetic_offline}
$PY -m verl.trainer.main_sft \
    data.train_files=$DATA/sft_train.parquet data.val_files=$DATA/sft_test.parquet \
    trainer.experiment_name=arithmetic_sft "$@"
