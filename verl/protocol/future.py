"""``DataProtoFuture``: a DataProto that is not computed yet (ray object refs or concurrent futures)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from verl.protocol.data_proto import DataProto

__all__ = ["DataProtoFuture"]


def _select_chunk(data: DataProto, index: int, chunks: int) -> DataProto:
    return data.chunk(chunks)[index]


@dataclass(eq=False)
class DataProtoFuture:
    """A DataProto that is not computed yet: ``get()`` resolves ``futures``, merges them with ``collect_fn`` and
    applies ``dispatch_fn`` (e.g. "take chunk i") if set. Lets the driver pass one step's output to the next step
    without waiting for it."""

    collect_fn: Callable[[list[Any]], Any]
    futures: list[Any]
    dispatch_fn: Callable[[Any], Any] | None = None

    @staticmethod
    def concat(data: list[Any]) -> DataProtoFuture:
        """A future that concatenates the DataProtos behind ``data`` (object refs, futures or values)."""
        return DataProtoFuture(collect_fn=DataProto.concat, futures=list(data))

    def chunk(self, chunks: int) -> list[DataProtoFuture]:
        """``chunks`` futures; the i-th resolves to ``self.get().chunk(chunks)[i]``."""
        previous = self.dispatch_fn

        def make(i: int) -> Callable[[Any], Any]:
            def dispatch(x: Any) -> Any:
                return _select_chunk(previous(x) if previous is not None else x, i, chunks)

            return dispatch

        return [DataProtoFuture(self.collect_fn, self.futures, make(i)) for i in range(chunks)]

    def get(self) -> Any:
        """Resolve every future (``ray.ObjectRef`` via one ``ray.get``, ``concurrent.futures.Future`` via
        ``.result()``, anything else as is), then apply ``collect_fn`` and ``dispatch_fn``."""
        values = list(self.futures)
        # ray is imported only if the caller already did: no ObjectRef can exist otherwise
        ray = sys.modules.get("ray")
        if ray is not None:
            ref_positions = [i for i, v in enumerate(values) if isinstance(v, ray.ObjectRef)]
            if ref_positions:
                resolved = ray.get([values[i] for i in ref_positions])
                for i, v in zip(ref_positions, resolved):
                    values[i] = v
        values = [v.result() if isinstance(v, Future) else v for v in values]
        output = self.collect_fn(values)
        if self.dispatch_fn is not None:
            output = self.dispatch_fn(output)
        return output
