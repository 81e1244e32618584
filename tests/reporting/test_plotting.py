"""Tests of verl/reporting/plotting.py."""

from __future__ import annotations

import json
import logging

import pytest

from verl.reporting.plotting import (
    TRAINER_KINDS,
    MetricsFileError,
    collect_series,
    guess_trainer_kind,
    plot_metrics,
    plot_run,
    read_metrics_jsonl,
    render_panel_svg,
    resolve_panels,
)


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


# ------------------------------------------------------------------------------------------- trainer panels
def test_every_kind_has_panels_and_unknown_kind_is_named() -> None:
    assert set(TRAINER_KINDS) == {"ppo", "sft", "dpo", "kto", "gkd"}
    with pytest.raises(ValueError, match="unknown trainer kind 'rm'"):
        resolve_panels("rm", ["loss"])


def test_resolve_panels_matches_patterns_in_order_and_drops_empty() -> None:
    keys = [
        "critic/score/mean",
        "val-core/b/acc/mean@10",
        "val-core/b/acc/mean@2",
        "val-core/b/acc/best@2/mean",  # not a mean@N: not on the validation panel
        "timing_s/gen",
        "timing_s/step",
        "timing_s/update_actor",
        "actor/ppo_kl",
    ]
    panels = {p.title: p.keys for p in resolve_panels("ppo", keys)}
    assert panels["Validation (held-out)"] == ("val-core/b/acc/mean@2", "val-core/b/acc/mean@10")
    assert panels["Time per phase"] == ("timing_s/gen", "timing_s/update_actor")  # the step total is excluded
    assert panels["KL"] == ("actor/ppo_kl",)
    assert "Critic: values" not in panels and "Entropy" not in panels  # GRPO logged none of them
    assert [p.title for p in resolve_panels("dpo", ["eval/rewards/margins"])] == ["Reward margin (chosen - rejected)"]


def test_guess_trainer_kind() -> None:
    assert guess_trainer_kind(["actor/pg_loss", "loss"]) == "ppo"
    assert guess_trainer_kind(["loss", "rewards/margins", "kl"]) == "kto"
    assert guess_trainer_kind(["loss", "rewards/margins"]) == "dpo"
    assert guess_trainer_kind(["loss", "lr"]) == "sft"


def test_plot_run_draws_the_kind_panels_and_svg_has_curves(tmp_path) -> None:
    rows = [{"step": 0, "metrics": {"val-core/a/acc/mean@1": 0.305}}]
    for s in range(1, 4):
        rows.append({"step": s, "metrics": {"critic/score/mean": s / 10, "timing_s/gen": 1.0, "timing_s/step": 1.5}})
    rows[-1]["metrics"]["val-core/a/acc/mean@1"] = 0.469
    jsonl = tmp_path / "metrics.jsonl"
    _write(jsonl, rows)
    assert plot_run(str(jsonl), str(tmp_path / "m.png")) == str(tmp_path / "m.png")  # kind guessed: ppo
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    parsed = read_metrics_jsonl(str(jsonl))
    panels = {p.title: p for p in resolve_panels("ppo", ["val-core/a/acc/mean@1", "timing_s/gen"])}
    svg = render_panel_svg(parsed, panels["Validation (held-out)"], id_prefix="v-")
    assert svg.startswith("<svg") and svg.count("<path") > 5
    assert ">0.305<" in svg and ">0.469<" in svg  # both validation points carry their value
    assert 'id="v-' in svg and 'id="figure_1"' not in svg
    stacked = render_panel_svg(parsed, panels["Time per phase"])
    assert ">other<" in stacked  # timing_s/step minus the phases in it
    _write(tmp_path / "none.jsonl", [{"step": 1, "metrics": {"unrelated": 1}}])
    assert plot_run(str(tmp_path / "none.jsonl"), str(tmp_path / "n.png"), "sft") is None
    assert not (tmp_path / "n.png").exists()


def test_read_metrics_collects_problems_when_asked(tmp_path) -> None:
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text('{"step": 1, "metrics": {"a": 1}}\nnot json\n{"step": 2, "metrics": {"a": 2}}\n')
    problems: list[str] = []
    assert read_metrics_jsonl(str(jsonl), problems) == [(1, {"a": 1}), (2, {"a": 2})]
    assert len(problems) == 1 and problems[0].startswith(f"{jsonl}:2: not a metrics record")
    with pytest.raises(MetricsFileError, match=r"m\.jsonl:2"):
        read_metrics_jsonl(str(jsonl))


def test_collect_series_keeps_the_later_value_of_a_step() -> None:
    rows = [(2, {"loss": 1.0}), (2, {"loss": 0.5, "eval/loss": 0.7}), (1, {"loss": 2.0})]
    assert collect_series(rows, ["loss", "eval/loss"]) == {
        "loss": ([1, 2], [2.0, 0.5], False),
        "eval/loss": ([2], [0.7], True),
    }
