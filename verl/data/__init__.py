"""Datasets for RL training: parquet prompts (``RLHFDataset``), resumable sampling and loading, bundled data."""

from verl.utils.dataset.bundled import resolve_data_path
from verl.utils.dataset.dataloader import StatefulDataLoader
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from verl.utils.dataset.sampler import ResumableSampler, create_rl_sampler

__all__ = [
    "RLHFDataset",
    "ResumableSampler",
    "StatefulDataLoader",
    "collate_fn",
    "create_rl_sampler",
    "resolve_data_path",
]
