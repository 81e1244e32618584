"""The one seed schedule of generation (verl.utils.seeding) and that no other module derives seeds by hand."""

from __future__ import annotations

import re
from pathlib import Path

import verl
from verl.utils.seeding import (
    KEY_STRIDE,
    SUBCALL_STRIDE,
    epoch_seed,
    generation_seed,
    keyed_seed,
    replica_seed,
    subcall_seed,
)


def test_schedule_values() -> None:
    assert generation_seed(None, 5) is None
    assert [generation_seed(7, i) for i in range(3)] == [7, 8, 9]
    assert replica_seed(100, 3) == 103
    assert subcall_seed(None, 2) is None
    assert subcall_seed(10, 0) == 10
    assert subcall_seed(10, 2) == 10 + 2 * SUBCALL_STRIDE
    assert keyed_seed(3, 4) == 3 * KEY_STRIDE + 4
    assert epoch_seed(42, 3) == 45


def test_subcall_streams_stay_off_the_call_streams() -> None:
    """Within what one run reaches (calls, replicas, turn batches), no sub-call of a call (k >= 1, any replica)
    draws with the seed of a call itself (any replica). Replica ``r`` of call ``c`` and replica ``r - 1`` of call
    ``c + 1`` do share a seed (``seed + c + r``): they sample other prompts with other weights."""
    calls, ranks, subcalls = 300, 8, 20
    call_seeds = {replica_seed(generation_seed(0, c), r) for c in range(calls) for r in range(ranks)}  # type: ignore[arg-type]
    sub_seeds = {
        replica_seed(subcall_seed(generation_seed(0, c), k), r)  # type: ignore[arg-type]
        for c in range(calls)
        for r in range(ranks)
        for k in range(1, subcalls)
    }
    assert call_seeds.isdisjoint(sub_seeds)
    assert len({keyed_seed(s, k) for s in range(5) for k in range(1000)}) == 5000


def test_no_hand_written_seed_arithmetic_outside_the_schedule() -> None:
    """The strides live in verl/utils/seeding.py only: any other module writing them derives seeds on its own."""
    root = Path(verl.__file__).parent
    pattern = re.compile(r"\b(7919|100003|1_?000_?003)\b")
    offenders = [
        f"{path.relative_to(root)}:{n}"
        for path in root.rglob("*.py")
        if path.name != "seeding.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == [], f"seed strides written outside verl.utils.seeding: {offenders}"
