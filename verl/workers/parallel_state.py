"""Per-rank state the FSDP workers share: sequence-parallel batches and CPU offloading between phases.

* Ulysses sequence parallelism: the driver splits a batch over all ``world`` ranks as usual; the ``sp`` consecutive
  ranks of a sequence-parallel group then pool their rows (:func:`gather_group_batch`), all compute on the pooled
  rows with each sequence split over the group, and each rank returns the outputs of its own rows
  (:func:`own_rows`). The pooled rows of group ``g`` are exactly the rows a rank of a ``world / sp``-rank
  data-parallel run would get, so results match that run.
* ``fsdp_config.param_offload`` / ``optimizer_offload`` (verl's semantics): the (sharded) parameters and the
  optimizer state live in CPU memory between the worker's calls and are brought to the accelerator for the call.
  On a CPU device they already are in CPU memory: a logged no-op.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

from verl.base_config import omega_conf_to_dataclass
from verl.protocol import DataProto
from verl.sections.engine import FSDPConfig

logger = logging.getLogger(__name__)


def gather_group_batch(data: DataProto, group: Any) -> tuple[DataProto, slice]:
    """The rows of every rank of ``group`` (in rank order), and the slice of them that are this rank's own.

    ``data`` must have the same number of rows on every rank of the group (the dispatch splits evenly).
    """
    if group is None:
        return data, slice(0, len(data))
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    device = next(iter(data.batch.values())).device if data.batch is not None and len(data.batch.keys()) else None
    parts: list[Any] = [None] * size
    dist.all_gather_object(parts, data.to("cpu"), group=group)
    sizes = [len(p) for p in parts]
    if len(set(sizes)) != 1:
        raise RuntimeError(f"sequence-parallel ranks got unequal row counts {sizes}; the dispatch must split evenly")
    pooled = DataProto.concat(parts, meta_info_conflicts="first")
    pooled.meta_info = dict(data.meta_info)
    if device is not None:
        pooled = pooled.to(device)
    n = len(data)
    return pooled, slice(rank * n, (rank + 1) * n)


def own_rows(output: DataProto, rows: slice) -> DataProto:
    """This rank's rows of an output computed on the pooled batch (meta_info kept)."""
    if rows.start == 0 and rows.stop == len(output):
        return output
    return output[rows]


def move_optimizer_state(optimizer: torch.optim.Optimizer | None, device: torch.device | str) -> None:
    """Move every tensor of the optimizer's state (AdamW moments, step counters) to ``device``, in place."""
    if optimizer is None:
        return
    for state in optimizer.state.values():
        for key, value in state.items():
            if torch.is_tensor(value):
                state[key] = value.to(device, non_blocking=True)


class OffloadPolicy:
    """``param_offload`` / ``optimizer_offload`` of one model: CPU memory between calls, the device during them.

    Args:
        module: the (possibly FSDP2-sharded) model; ``module.to`` moves its shards.
        optimizer: its optimizer, or None (a reference model).
        fsdp_config: the role's ``fsdp_config`` section.
        device: the compute device; on CPU both options are no-ops (logged once).
        who: the config path of the section, for the log line.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None,
        fsdp_config: FSDPConfig | Mapping[str, Any],
        device,
        who: str,
    ) -> None:
        self.module, self.optimizer, self.device = module, optimizer, torch.device(device)
        cfg = omega_conf_to_dataclass(fsdp_config, FSDPConfig)  # a partial mapping: FSDPConfig's defaults (off)
        self.params = cfg.param_offload
        self.optim = cfg.optimizer_offload and optimizer is not None
        if (self.params or self.optim) and cfg.offload_policy and self.device.type == "cuda":
            # FSDP2's CPUOffloadPolicy already keeps parameters, gradients and optimizer state in CPU memory (the
            # optimizer steps there): moving them again would put the state on the GPU for the step (upstream's rule)
            logger.info("%s.offload_policy: FSDP offloads; param_offload/optimizer_offload are not needed", who)
            self.params = self.optim = False
        if (self.params or self.optim) and self.device.type == "cpu":
            logger.info("%s.param_offload/optimizer_offload: the model already lives in CPU memory; nothing to do", who)
            self.params = self.optim = False
        self.offload()

    @property
    def active(self) -> bool:
        """Whether anything is moved between calls."""
        return self.params or self.optim

    def offload(self) -> None:
        """Parameters and/or optimizer state to CPU memory (the accelerator's cache is released)."""
        if self.params:
            self.module.to("cpu")
        if self.optim:
            move_optimizer_state(self.optimizer, "cpu")
        if self.active and self.device.type == "cuda":
            torch.cuda.empty_cache()

    def load(self, with_optimizer: bool = False) -> None:
        """Parameters (and, ``with_optimizer``, the optimizer state) back to the compute device."""
        if self.params:
            self.module.to(self.device)
        if self.optim and with_optimizer:
            move_optimizer_state(self.optimizer, self.device)

    @contextmanager
    def loaded(self, with_optimizer: bool = False) -> Iterator[None]:
        """On the device for the block, back in CPU memory afterwards (also when the block raises)."""
        self.load(with_optimizer)
        try:
            yield
        finally:
            self.offload()


@contextmanager
def all_loaded(*policies: OffloadPolicy | None, with_optimizer: bool = False) -> Iterator[None]:
    """:meth:`OffloadPolicy.loaded` for several models at once (None entries are skipped)."""
    active = [p for p in policies if p is not None]
    for p in active:
        p.load(with_optimizer)
    try:
        yield
    finally:
        for p in active:
            p.offload()
