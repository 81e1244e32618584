"""Tests of verl/utils/plotting.py."""

from __future__ import annotations

import json
import logging

import pytest

from verl.utils.plotting import collect_series, plot_metrics, read_metrics_jsonl


def _write(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_plot_writes_png_with_dense_and_sparse_keys(tmp_path, caplog) -> None:
    rows = []
    for step in range(1, 7):
        metrics = {"critic/score/mean": step / 10, "response_length/mean": 20 + step}
        if step % 3 == 0:
            metrics["val-core/gsm8k/acc/mean@1"] = step / 6
        rows.append({"step": step, "metrics": metrics})
    rows[2]["metrics"]["critic/score/mean"] = None  # a non-finite value logged as null
    jsonl = tmp_path / "metrics.jsonl"
    _write(jsonl, rows)
    png = tmp_path / "plots" / "metrics.png"
    with caplog.at_level(logging.WARNING):
        out = plot_metrics(
            str(jsonl),
            str(png),
            keys=("critic/score/mean", "response_length/mean", "val-core/gsm8k/acc/mean@1", "missing/key"),
            title="run",
        )
    assert out == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "missing/key" in caplog.text
    series = collect_series(
        read_metrics_jsonl(str(jsonl)),
        ["critic/score/mean", "response_length/mean", "val-core/gsm8k/acc/mean@1", "missing/key"],
    )
    assert series["critic/score/mean"][:2] == ([1, 2, 4, 5, 6], [0.1, 0.2, 0.4, 0.5, 0.6])  # null dropped
    assert series["critic/score/mean"][2] is False  # still a dense series
    assert series["response_length/mean"] == ([1, 2, 3, 4, 5, 6], [21.0, 22.0, 23.0, 24.0, 25.0, 26.0], False)
    assert series["val-core/gsm8k/acc/mean@1"] == ([3, 6], [0.5, 1.0], True)  # sparse -> drawn with markers
    assert "missing/key" not in series


def test_plot_nothing_to_plot(tmp_path, caplog) -> None:
    jsonl = tmp_path / "m.jsonl"
    _write(jsonl, [{"step": 1, "metrics": {"a": 1}}])
    with caplog.at_level(logging.WARNING):
        assert plot_metrics(str(jsonl), str(tmp_path / "x.png"), keys=("b",)) is None
    assert not (tmp_path / "x.png").exists()


def test_read_metrics_bad_line_named(tmp_path) -> None:
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text('{"step": 1, "metrics": {"a": 1}}\n\n{"step": 2}\n')
    with pytest.raises(ValueError, match=r"m\.jsonl:3"):
        read_metrics_jsonl(str(jsonl))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_metrics_jsonl(str(tmp_path / "none.jsonl"))
