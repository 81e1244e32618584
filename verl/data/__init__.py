"""Data: datasets for RL and the offline trainers (parquet prompts, ``RLHFDataset``; SFT and preference pairs),
images and video of multi-modal rows, resumable sampling and loading, and the bundled files (``bundled://``, the
``arithmetic/`` parquet files that :mod:`verl.data.arithmetic_task` generates).

verl's ``verl.utils.dataset`` is this package (``verl.utils.dataset.arithmetic`` is ``verl.data.arithmetic_task``).
"""

from verl.data.bundled import resolve_data_path
from verl.data.dataloader import StatefulDataLoader
from verl.data.rl_dataset import RLHFDataset, collate_fn
from verl.data.sampler import ResumableSampler, create_rl_sampler

__all__ = [
    "RLHFDataset",
    "ResumableSampler",
    "StatefulDataLoader",
    "collate_fn",
    "create_rl_sampler",
    "resolve_data_path",
]
