"""The MFU peak probe leaves the global torch generator alone: its shapes follow the measured speed (the machine's
load), so drawing them from the global generator shifted every later draw of a run by a load-dependent amount and
two runs of the same command sampled differently from the step after the probe."""

from __future__ import annotations

import torch

from verl.hardware import peak


def test_probe_does_not_draw_from_the_global_generator(monkeypatch) -> None:
    monkeypatch.setattr(peak, "_PROBE_CACHE", {})
    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    peak.measure_peak_at_shapes("cpu", torch.float32, [(64, 64, 64), (32, 64, 16)], repeats=1)
    assert torch.equal(torch.rand(4), expected)
