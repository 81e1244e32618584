"""Checkpoint save / load / resume / retention (layout: ``<default_local_dir>/global_step_N/{actor,critic}``)."""

from verl.utils.checkpoint.checkpoint_manager import (
    check_checkpoint_files,
    get_rng_state,
    load_extra_state,
    load_optimizer,
    safe_torch_load,
    save_extra_state,
    save_model_hf,
    save_optimizer,
    set_rng_state,
)
from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
from verl.utils.checkpoint.layout import (
    checkpoint_root,
    finalize_checkpoint,
    find_latest_ckpt_path,
    get_checkpoint_step,
    get_checkpoint_tracker_filename,
    get_step_dir,
    remove_old_checkpoints,
    resolve_resume_path,
)
from verl.utils.checkpoint.sharded_state import (
    load_model_shard,
    reassemble_full_state_dict,
    save_sharded_model,
)

__all__ = [
    "FSDPCheckpointManager",
    "check_checkpoint_files",
    "checkpoint_root",
    "finalize_checkpoint",
    "find_latest_ckpt_path",
    "get_checkpoint_step",
    "get_checkpoint_tracker_filename",
    "get_rng_state",
    "get_step_dir",
    "load_extra_state",
    "load_model_shard",
    "load_optimizer",
    "reassemble_full_state_dict",
    "remove_old_checkpoints",
    "resolve_resume_path",
    "safe_torch_load",
    "save_extra_state",
    "save_model_hf",
    "save_optimizer",
    "save_sharded_model",
    "set_rng_state",
]
