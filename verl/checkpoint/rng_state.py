"""The random generators' state (torch CPU and CUDA, numpy, Python ``random``) as ``torch.load(weights_only=True)``
can read it back: what a role's checkpoint stores so a resumed run draws the same random numbers.

Its own module so that :mod:`.checkpoint_manager` (which writes it in the extra state) and :mod:`.base_manager`
(upstream's ``BaseCheckpointManager.get_rng_state`` / ``load_rng_state``) both import it from below; both modules
still export :func:`get_rng_state` and :func:`set_rng_state` under their old names.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

__all__ = ["get_rng_state", "set_rng_state"]


def get_rng_state() -> dict[str, Any]:
    """Snapshot the torch CPU (+ CUDA when available), numpy and Python ``random`` generators.

    Stored only as tensors and plain Python values so ``torch.load(weights_only=True)`` can read it back:
    the numpy MT19937 key (624 uint32) and Python's state tuple become int64 tensors.
    """
    np_state = np.random.get_state()
    py_version, py_internal, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "cpu": torch.get_rng_state(),
        "numpy": {
            "bit_generator": str(np_state[0]),
            "key": torch.from_numpy(np.asarray(np_state[1], dtype=np.int64).copy()),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": {
            "version": int(py_version),
            "internal": torch.tensor(py_internal, dtype=torch.int64),
            "gauss_next": py_gauss,
        },
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore generators from :func:`get_rng_state` output (CUDA only if saved and available)."""
    for key in ("cpu", "numpy", "python"):
        if key not in state:
            raise KeyError(f"RNG state lacks {key!r}; expected keys cpu, numpy, python (and cuda)")
    torch.set_rng_state(state["cpu"].to("cpu", torch.uint8))
    np_s = state["numpy"]
    np.random.set_state(
        (
            np_s["bit_generator"],
            np_s["key"].numpy().astype(np.uint32),
            int(np_s["pos"]),
            int(np_s["has_gauss"]),
            float(np_s["cached_gaussian"]),
        )
    )
    py = state["python"]
    random.setstate((int(py["version"]), tuple(int(x) for x in py["internal"].tolist()), py["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        cuda_states = state["cuda"]
        if len(cuda_states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda_states)
        else:  # a different GPU count: restore this process's current device only
            torch.cuda.set_rng_state(cuda_states[0])
