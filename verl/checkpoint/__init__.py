"""The one checkpoint home: save / load / resume / retention of every trainer (verl's ``verl.utils.checkpoint``).

Layout: ``<default_local_dir>/global_step_N/<role>`` (per-rank shard files, see
:mod:`.fsdp_checkpoint_manager`), ``checkpoint_complete.json`` written last, the
``latest_checkpointed_iteration.txt`` tracker (see :mod:`.layout`). The marker records the run identity (model,
architecture, algorithm, roles, LoRA rank) that every resume is checked against (see :mod:`.identity`).
"""

from verl.checkpoint.checkpoint_manager import (
    get_rng_state,
    load_extra_state,
    safe_torch_load,
    save_extra_state,
    save_model_hf,
    set_rng_state,
)
from verl.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
from verl.checkpoint.identity import CheckpointMismatchError, check_resume_identity, make_identity
from verl.checkpoint.layout import (
    check_checkpoint_root,
    checkpoint_root,
    finalize_checkpoint,
    find_latest_ckpt_path,
    get_checkpoint_step,
    get_checkpoint_tracker_filename,
    get_step_dir,
    remove_old_checkpoints,
    resolve_resume_path,
)
from verl.checkpoint.optimizer_state import load_optimizer_shards, save_optimizer_shards
from verl.checkpoint.sharded_state import ShardReader, read_full_state_dict, save_state_shards

__all__ = [
    "CheckpointMismatchError",
    "FSDPCheckpointManager",
    "ShardReader",
    "check_checkpoint_root",
    "check_resume_identity",
    "checkpoint_root",
    "finalize_checkpoint",
    "find_latest_ckpt_path",
    "get_checkpoint_step",
    "get_checkpoint_tracker_filename",
    "get_rng_state",
    "get_step_dir",
    "load_extra_state",
    "load_optimizer_shards",
    "make_identity",
    "read_full_state_dict",
    "remove_old_checkpoints",
    "resolve_resume_path",
    "safe_torch_load",
    "save_extra_state",
    "save_model_hf",
    "save_optimizer_shards",
    "save_state_shards",
    "set_rng_state",
]
