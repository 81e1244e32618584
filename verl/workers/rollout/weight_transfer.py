"""One weight-transfer path from the trainer to a rollout engine in another process, over ``torch.distributed``.

A :class:`WeightTransferGroup` is a process group of its own (a ``TCPStore`` rendezvous on the given host and port,
then ``ProcessGroupGloo`` on CPU or ``ProcessGroupNCCL`` on GPU), separate from the trainer's default group, so
rollout processes that are not part of the training world can still receive broadcasts. Rank 0 sends; ranks 1 to
``receivers`` receive, every one of them each broadcast (a pool of rollout processes gets one push, not one each).
One push is a stream of tensors, each preceded by a small header (name, shape, dtype) and ended by an empty header,
so the sender can hand over a lazy iterator (a sharded actor gathers one tensor at a time) and never holds a second
full copy of the model. The same path carries full weights and, with LoRA, only the adapter tensors (``lora_A`` /
``lora_B``): what is pushed is the caller's choice of ``named_tensors``.

Upstream verl syncs with NCCL broadcasts between the trainer and the rollout workers in its one-step-off and fully
asynchronous trainers (``verl/experimental/one_step_off_policy``, ``fully_async_policy``); this is the same idea on
a stand-alone group, with gloo where there is no GPU.
"""

from __future__ import annotations

import datetime
import pickle
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["WeightTransferError", "WeightTransferGroup", "load_named_tensors"]

SENDER = 0


class WeightTransferError(RuntimeError):
    """A weight push failed: the other process went away, or the rendezvous or a broadcast timed out."""


class WeightTransferGroup:
    """The group of one trainer (rank 0, sender) and ``receivers`` rollout processes (ranks 1 to ``receivers``).

    Args:
        host: the rendezvous address (``127.0.0.1`` on one machine).
        port: the rendezvous port; the sender listens on it.
        rank: 0 (sender) or 1 to ``receivers`` (a receiver).
        backend: ``gloo`` (tensors on CPU) or ``nccl`` (tensors on the current CUDA device).
        timeout_s: how long the rendezvous and one broadcast may wait for the other side.
        receivers: how many rollout processes receive each push.
    """

    def __init__(
        self, host: str, port: int, rank: int, backend: str = "gloo", timeout_s: float = 600.0, receivers: int = 1
    ) -> None:
        self._host, self._port, self._timeout_s = host, int(port), float(timeout_s)
        if int(receivers) < 1:
            raise ValueError(f"receivers must be >= 1, got {receivers}")
        self.world_size = 1 + int(receivers)
        if not 0 <= int(rank) < self.world_size:
            raise ValueError(f"rank must be {SENDER} (sender) or 1..{receivers} (a receiver), got {rank}")
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"backend must be gloo or nccl, got {backend!r}")
        self.rank = rank
        self.backend = backend
        self.device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
        timeout = datetime.timedelta(seconds=timeout_s)
        try:
            # the sender's store listens at once and does not wait: the caller checks that the receiver lives
            # while the process group below forms (a receiver that dies first must not leave it waiting)
            self._store = dist.TCPStore(
                host, int(port), self.world_size, is_master=rank == SENDER, timeout=timeout, wait_for_workers=False
            )
        except Exception as err:  # noqa: BLE001 - reported as what it is
            raise WeightTransferError(f"weight-transfer store on {host}:{port} failed: {err}") from err
        self._pg: Any = None
        self.pushes = 0  # completed pushes (both sides count)
        self.bytes_last = 0  # payload bytes of the last push

    def connect(self) -> None:
        """Form the process group (every member calls it; it waits for the others)."""
        if self._pg is not None:
            return
        timeout = datetime.timedelta(seconds=self._timeout_s)
        try:
            if self.backend == "nccl":
                self._pg = dist.ProcessGroupNCCL(self._store, self.rank, self.world_size)
            else:
                self._pg = dist.ProcessGroupGloo(self._store, self.rank, self.world_size, timeout)
        except Exception as err:  # noqa: BLE001 - reported as what it is: the peer never joined
            raise WeightTransferError(f"weight-transfer rendezvous on {self._host}:{self._port} failed: {err}") from err

    def _broadcast(self, tensor: torch.Tensor) -> None:
        self.connect()
        try:
            self._pg.broadcast(tensor, SENDER).wait()
        except Exception as err:  # noqa: BLE001 - gloo/NCCL raise RuntimeError subclasses of many kinds
            raise WeightTransferError(f"weight broadcast failed (has the other process exited?): {err}") from err

    def _send_header(self, header: Any) -> None:
        payload = torch.frombuffer(bytearray(pickle.dumps(header)), dtype=torch.uint8).to(self.device)
        self._broadcast(torch.tensor([payload.numel()], dtype=torch.int64, device=self.device))
        self._broadcast(payload)

    def _recv_header(self) -> Any:
        size = torch.zeros(1, dtype=torch.int64, device=self.device)
        self._broadcast(size)
        payload = torch.empty(int(size.item()), dtype=torch.uint8, device=self.device)
        self._broadcast(payload)
        return pickle.loads(payload.cpu().numpy().tobytes())  # noqa: S301 - written by our own sender

    def send(self, named_tensors: Iterable[tuple[str, torch.Tensor]], meta: dict[str, Any] | None = None) -> int:
        """Push ``(name, tensor)`` pairs (consumed one at a time) and ``meta`` (e.g. ``{"version": 3}``) to the
        receiver; returns the payload size in bytes. Rank 0 only."""
        if self.rank != SENDER:
            raise RuntimeError("send() is for rank 0 (the trainer side)")
        self._send_header({"meta": dict(meta or {})})
        total = 0
        for name, tensor in named_tensors:
            data = tensor.detach().to(self.device).contiguous()
            self._send_header({"name": name, "shape": tuple(data.shape), "dtype": data.dtype})
            self._broadcast(data)
            total += data.numel() * data.element_size()
        self._send_header(None)
        self.pushes += 1
        self.bytes_last = total
        return total

    def receive(self) -> tuple[dict[str, Any], Iterator[tuple[str, torch.Tensor]]]:
        """The ``meta`` of the next push and a lazy iterator of its ``(name, tensor)`` pairs, which the caller must
        drain (each step receives one tensor). Receivers only."""
        if self.rank == SENDER:
            raise RuntimeError("receive() is for the receivers (the rollout side)")
        first = self._recv_header()
        meta = dict(first.get("meta", {})) if isinstance(first, dict) else {}

        def tensors() -> Iterator[tuple[str, torch.Tensor]]:
            total = 0
            while True:
                header = self._recv_header()
                if header is None:
                    break
                data = torch.empty(header["shape"], dtype=header["dtype"], device=self.device)
                self._broadcast(data)
                total += data.numel() * data.element_size()
                yield header["name"], data
            self.pushes += 1
            self.bytes_last = total

        return meta, tensors()


def load_named_tensors(module: torch.nn.Module, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> int:
    """Copy received ``(name, tensor)`` pairs into ``module``'s parameters and buffers of the same names (in place,
    so an engine generating with ``module`` uses them at once); returns how many were copied. A name the module
    does not have raises ``KeyError`` naming it: a silent skip is how an adapter ends up never synced."""
    # the state dict names tied weights under each of their names (lm_head.weight and embed_tokens.weight)
    params = module.state_dict(keep_vars=True)
    count = 0
    with torch.no_grad():
        for name, tensor in named_tensors:
            target = params.get(name)
            if target is None:
                raise KeyError(f"received weight {name!r} has no parameter of that name in the rollout model")
            if tuple(target.shape) != tuple(tensor.shape):
                raise ValueError(f"received weight {name!r} has shape {tuple(tensor.shape)}, expected {target.shape}")
            target.copy_(tensor.to(device=target.device, dtype=target.dtype))
            count += 1
    return count
