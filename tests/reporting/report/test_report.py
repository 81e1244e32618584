"""Tests of verl/reporting/report: the report of synthetic run directories, read back by a real browser."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl.checkpoint.layout import write_complete_marker
from verl.reporting.report import (
    REPORT_FILE,
    RUN_INFO_FILE,
    SAMPLES_FILE,
    RunReporter,
    build_report,
    collect_run,
    phase_table,
    validation_summary,
    write_report,
)
from verl.reporting.report.__main__ import main as report_main

HOSTILE = "<script>alert('x')</script> & <b>bold</b>"
PHASES = {"gen": 2.0, "reward": 0.5, "update_actor": 1.0}  # seconds per step; timing_s/step = 4.0 -> other = 0.5


def _ppo_rows(steps: int = 4) -> list[dict]:
    rows = [{"step": 0, "metrics": {"val-core/arithmetic/reward/mean@1": 0.305, "timing_s/testing": 1.0}}]
    for s in range(1, steps + 1):
        m = {
            "critic/score/mean": 0.1 * s,
            "actor/entropy": 1.0 / s,
            "actor/ppo_kl": 0.01 * s,
            "actor/kl_loss": 0.02 * s,
            "response_length/mean": 10.0 + s,
            "perf/throughput": 100.0 + s,
            "timing_s/step": 4.0,
            **{f"timing_s/{k}": v for k, v in PHASES.items()},
        }
        if s == steps:
            m.update({"val-core/arithmetic/reward/mean@1": 0.469, "timing_s/testing": 1.0})
        if s % 2 == 0:
            m["timing_s/save_checkpoint"] = 2.0
        rows.append({"step": s, "metrics": m})
    return rows


def make_run_dir(root: Path, rows: list[dict] | None = None, status_step: int | None = 4) -> Path:
    """A PPO run directory as the trainer leaves it: run_info, config, metrics, samples, two checkpoints."""
    run = root / "run"
    metrics = run / "logs" / "metrics.jsonl"
    metrics.parent.mkdir(parents=True)
    metrics.write_text("".join(json.dumps(r) + "\n" for r in (rows if rows is not None else _ppo_rows())))
    config = OmegaConf.create({"trainer": {"experiment_name": "exp", "note": HOSTILE}, "data": {"max_len": 8}})
    reporter = RunReporter(
        str(run),
        "ppo",
        config,
        str(metrics),
        plot=False,
        report=True,
        hardware={"device": "cpu", "cpu": "Test CPU", "dtype": "float32"},
        extra={"algorithm": "grpo", "experiment": "exp", "total_steps": 4},
    )
    reporter.start()
    reporter.record_samples(2, [{"prompt": HOSTILE, "response": "42", "score": 1.0, "ground_truth": "42"}])
    reporter.record_samples(4, [{"prompt": "What is 1+1?", "response": "2", "score": 1.0, "ground_truth": "2"}])
    complete = run / "global_step_2"
    (complete / "actor").mkdir(parents=True)
    (complete / "actor" / "weights.bin").write_bytes(b"\0" * 2048)
    write_complete_marker(str(complete), 2, roles=["actor"])
    (run / "global_step_4" / "actor").mkdir(parents=True)  # a save that never finished: no marker
    (run / "latest_checkpointed_iteration.txt").write_text("2")
    if status_step is not None:
        reporter.update(status_step)
    return run


# ------------------------------------------------------------------------------------------------ data side
def test_phase_table_means_shares_and_other() -> None:
    rows = [(r["step"], r["metrics"]) for r in _ppo_rows()]
    table = {p.name: p for p in phase_table(rows)}
    total = 4 * 4.0 + 2 * 1.0 + 2 * 2.0  # steps + testing (steps 0 and 4) + saves (steps 2 and 4)
    assert table["gen"].mean_s == pytest.approx(2.0) and table["gen"].steps == 4
    assert table["gen"].share == pytest.approx(8.0 / total)
    assert table["other (in step)"].total_s == pytest.approx(4 * 0.5)
    assert table["save_checkpoint"].steps == 2 and table["save_checkpoint"].total_s == pytest.approx(4.0)
    assert sum(p.share for p in table.values()) == pytest.approx(1.0)
    assert list(table)[0] == "gen"  # largest first
    # the offline trainers log only perf/time_per_step: one row
    offline = phase_table([(1, {"perf/time_per_step": 0.5}), (2, {"perf/time_per_step": 1.5})])
    assert [(p.name, p.mean_s, p.share) for p in offline] == [("step", 1.0, 1.0)]


def test_validation_summary_before_and_after() -> None:
    rows = [(r["step"], r["metrics"]) for r in _ppo_rows()]
    assert validation_summary(rows) == [("val-core/arithmetic/reward/mean@1", 0, 0.305, 4, 0.469)]


def test_collect_run_reads_every_file(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path)
    data = collect_run(str(run))
    assert data.kind == "ppo" and data.info["status"] == "running" and data.info["global_step"] == 4
    assert len(data.rows) == 5 and data.problems == []
    assert [(c.name, c.complete) for c in data.checkpoints] == [("global_step_2", True), ("global_step_4", False)]
    assert data.checkpoints[0].size_bytes >= 2048 and data.latest_step == 2
    assert data.hf_export is None
    assert [s["step"] for s in data.samples] == [2, 4] and data.samples[0]["prompt"] == HOSTILE
    assert "experiment_name: exp" in data.config_text


def test_report_escapes_run_text_and_fetches_nothing(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path)
    page = (run / REPORT_FILE).read_text()
    assert "<script" not in page  # the hostile prompt and config value are text, not markup
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in page
    assert "<link" not in page and " src=" not in page and "@import" not in page
    assert re.findall(r"url\((?!#)", page) == []  # only references inside the page's own SVGs
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids))  # the charts' element ids do not collide


def test_malformed_metrics_line_is_shown_not_fatal(tmp_path: Path, capsys) -> None:
    run = make_run_dir(tmp_path, status_step=None)
    metrics = run / "logs" / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    lines.insert(2, '{"step": 2, "metrics": {"critic/score/mean": 0.2')  # a line cut short
    metrics.write_text("\n".join(lines) + "\n")
    data = collect_run(str(run))
    assert len(data.rows) == 5
    assert len(data.problems) == 1 and f"{metrics}:3: not a metrics record" in data.problems[0]
    assert report_main([str(run)]) == 0
    captured = capsys.readouterr()
    assert f"{metrics}:3" in captured.err and captured.out.strip() == str(run / REPORT_FILE)
    page = (run / REPORT_FILE).read_text()
    assert 'id="problems"' in page and f"{metrics}:3" in page


def test_cli_refuses_what_is_not_a_run_dir(tmp_path: Path, capsys) -> None:
    assert report_main([str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert report_main([str(tmp_path / "empty")]) == 2
    assert "is not a run directory" in capsys.readouterr().err
    assert not (tmp_path / "empty" / REPORT_FILE).exists()


def test_reporter_statuses_resume_and_switches(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path)
    reporter = RunReporter(str(run), "ppo", None, str(run / "logs" / "metrics.jsonl"), plot=False, report=True)
    started = json.loads((run / RUN_INFO_FILE).read_text())["started_at"]
    reporter.start(resumed_step=2)  # a resumed run: samples after step 2 go, the first start time stays
    info = json.loads((run / RUN_INFO_FILE).read_text())
    assert info["started_at"] == started and info["resumed_from_step"] == 2 and info["status"] == "running"
    assert [json.loads(x)["step"] for x in (run / SAMPLES_FILE).read_text().splitlines()] == [2]
    reporter.finish(3, stopped_by="SIGTERM")
    assert json.loads((run / RUN_INFO_FILE).read_text())["status"] == "stopped"
    reporter.finish(3, error="RuntimeError: boom <x>")
    info = json.loads((run / RUN_INFO_FILE).read_text())
    assert info["status"] == "failed" and info["finished_at"]
    assert "RuntimeError: boom &lt;x&gt;" in (run / REPORT_FILE).read_text()
    with pytest.raises(ValueError, match="status 'done'"):
        reporter.update(3, "done")

    off = tmp_path / "off"
    quiet = RunReporter(str(off), "ppo", {"a": 1}, None, plot=False, report=False)
    quiet.start()
    quiet.record_samples(1, [{"prompt": "p"}])
    quiet.update(1)
    assert not off.exists()  # both switches off: nothing is written


def test_reporter_plots_png_and_never_raises(tmp_path: Path, caplog) -> None:
    run = make_run_dir(tmp_path, status_step=None)
    reporter = RunReporter(str(run), "ppo", None, str(run / "logs" / "metrics.jsonl"), plot=True, report=False)
    reporter.update(4)
    assert (run / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = RunReporter(str(run), "nope", None, str(run / "logs" / "metrics.jsonl"), plot=True, report=False)
    bad.update(4)  # an unknown kind: warned about, training goes on
    assert "unknown trainer kind 'nope'" in caplog.text


def test_report_without_metrics_file_says_why(tmp_path: Path) -> None:
    run = tmp_path / "run"
    RunReporter(str(run), "sft", {"x": 1}, None, plot=False, report=True).start()
    page = build_report(str(run))
    assert "No curves: no metrics file" in page and "The sft trainer generates nothing" in page


# ------------------------------------------------------------------------------------------------ in a browser
def test_report_renders_in_browser(tmp_path: Path, browser) -> None:
    run = make_run_dir(tmp_path)
    page = Path(write_report(str(run)))
    dom = browser.dump_dom(page)
    # charts: training reward, validation, KL, entropy, response length, time per phase, throughput
    assert len(dom.svg_paths) == 7, dom.svg_paths
    assert all(n > 5 for n in dom.svg_paths)  # axes, ticks and the curves are drawn
    assert {"status", "heldout", "charts", "phases", "samples", "checkpoints", "hardware", "config"} <= dom.ids
    assert dom.tags_in["phases"]["tr"] == 1 + 6  # header + gen, update_actor, save_checkpoint, testing, reward, other
    assert dom.tags_in["samples"]["tr"] == 3 and dom.tags_in["checkpoints"]["tr"] == 3
    assert "global_step_4" in dom.text_in["checkpoints"] and "incomplete" in dom.text_in["checkpoints"]
    assert "complete (latest)" in dom.text_in["checkpoints"]
    assert HOSTILE in dom.text_in["samples"]  # shown as text
    assert dom.tags["script"] == 0 and dom.tags["b"] == 0  # and not run as markup
    assert "experiment_name: exp" in dom.text_in["config"] and dom.tags_in["config"]["summary"] == 1
    assert "running" in dom.text_in["status"] and "0.305" in dom.html and "0.469" in dom.html
    fetched = [(t, a, v) for t, a, v in dom.attrs if a in ("src", "href") and "://" in v and not v.startswith("#")]
    assert fetched == []


def test_report_shows_what_one_step_consumes(tmp_path: Path) -> None:
    from verl.reporting.report import build_report
    from verl.trainer.config import load_config
    from verl.trainer.config.step_plan import step_plan, write_plan

    run = make_run_dir(tmp_path)
    config = load_config(["data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=4"])
    write_plan(step_plan(config), str(run))
    page = build_report(str(run))
    assert 'id="step-plan"' in page
    assert "optimizer steps per step" in page and "(16 / 4) * 1" in page
    (run / "step_plan.json").write_text("{not json")
    page = build_report(str(run))
    assert 'id="step-plan"' not in page and "step_plan.json: unreadable" in page
