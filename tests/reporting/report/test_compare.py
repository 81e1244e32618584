"""Tests of ``verl compare``: synthetic run directories written by the project's own writers (RunReporter for
run_info.json and config.yaml, Tracking's ``file`` logger for metrics.jsonl and val_generations.jsonl), compared."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from verl import cli
from verl.reporting import Tracking
from verl.reporting.report import RUN_INFO_FILE, RunReporter
from verl.reporting.report.collect import collect_run
from verl.reporting.report.compare import build_comparison, default_output_name, main
from verl.reporting.report.compare_data import (
    MISSING,
    NO_CONFIG,
    config_diff,
    flatten_config,
    pair_generations,
    run_names,
)

HOSTILE = "<script>alert('x')</script> & <b>bold</b>"


class _InfoOnly(RunReporter):
    """The trainers' RunReporter writing run_info.json and config.yaml, without drawing each run's own report."""

    def _draw(self, redraw_plot: bool = True) -> None:
        pass


def _config(lr: float, steps: int, name: str, extra: dict | None = None) -> dict:
    return {
        "actor_rollout_ref": {"actor": {"optim": {"lr": lr}}, "rollout": {"n": 2, "name": "hf"}},
        "data": {"train_batch_size": 4, "max_prompt_length": 64},
        "trainer": {"total_training_steps": steps, "experiment_name": name, "logger": ["file"]},
        **(extra or {}),
    }


def make_run(
    root: Path,
    name: str,
    steps: int,
    lr: float,
    generations: dict[str, str] | None,
    extra_metrics: dict[str, float] | None = None,
    extra_config: dict | None = None,
    finish: bool = True,
) -> Path:
    """A PPO run directory as the trainer leaves it: run_info.json and config.yaml (RunReporter), logs/metrics.jsonl
    and logs/val_generations.jsonl (the ``file`` logger), validation before training and at the last step."""
    run = root / name
    tracker = Tracking("verl", name, ["file"], config=None, log_dir=str(run / "logs"), keep_through_step=-1)
    reporter = _InfoOnly(
        str(run),
        "ppo",
        _config(lr, steps, name, extra_config),
        tracker.metrics_path,
        plot=False,
        report=True,
        hardware={"device": "cpu", "cpu": "Test CPU", "dtype": "float32"},
        extra={"algorithm": "grpo", "experiment": name, "total_steps": steps},
    )
    reporter.start()
    tracker.log({"val-core/arithmetic/reward/mean@1": 0.1, "timing_s/testing": 0.5}, step=0)
    for s in range(1, steps + 1):
        metrics = {
            "critic/score/mean": lr * 1e6 * s,
            "actor/pg_loss": -0.1 * s,
            "actor/entropy": 1.0 / s,
            "actor/ppo_kl": 0.01 * s,
            "response_length/mean": 10.0 + s,
            "perf/throughput": 100.0 * lr * 1e6,
            "timing_s/step": 2.0 * lr * 1e6,
            "timing_s/gen": 1.0 * lr * 1e6,
            "timing_s/update_actor": 0.5,
            **(extra_metrics or {}),
        }
        tracker.log(metrics, step=s)
    tracker.log({"val-core/arithmetic/reward/mean@1": 0.2 * lr * 1e6, "timing_s/testing": 0.5}, step=steps)
    if generations is not None:
        rows = [{"input": p, "output": "early " + r, "score": 0.0} for p, r in generations.items()]
        tracker.log_generations(rows, step=0)
        rows = [{"input": p, "output": r, "score": 1.0} for p, r in generations.items()]
        tracker.log_generations(rows, step=steps)
    tracker.finish()
    if finish:
        reporter.finish(steps)
    else:
        reporter.update(steps)  # still running
    return run


@pytest.fixture
def two_runs(tmp_path: Path) -> tuple[Path, Path]:
    a = make_run(
        tmp_path,
        "lr1",
        3,
        1e-6,
        {"What is 2+2?": "4", HOSTILE: "A answer", "only in A": "x"},
        extra_config={"algorithm": {"note": "true"}},
    )
    b = make_run(
        tmp_path,
        "lr2",
        5,
        2e-6,
        {HOSTILE: "B answer", "What is 2+2?": "four", "only in B": "y"},
        extra_metrics={"actor/kl_loss": 0.5},
        extra_config={"algorithm": {"use_kl_in_reward": True, "note": True}},
        finish=False,
    )
    return a, b


# ------------------------------------------------------------------------------------------------ data side
def test_flatten_and_config_diff() -> None:
    nested = {"a": {"b": {"c": 1}, "d": [1, 2]}, "e": {}, "f": None}
    assert flatten_config(nested) == {"a.b.c": 1, "a.d": [1, 2], "e": {}, "f": None}
    rows = config_diff([{"a": {"b": 1, "c": [1]}, "x": 0}, {"a": {"b": 2, "c": [1]}}, None])
    assert [(r.key, r.values) for r in rows] == [("a.b", [1, 2, NO_CONFIG]), ("x", [0, MISSING, NO_CONFIG])]
    assert config_diff([{"a": 1}, {"a": 1}]) == []
    assert [r.key for r in config_diff([{"a": [1, 2]}, {"a": [2, 1]}])] == ["a"]  # list order matters
    assert [r.key for r in config_diff([{"a": None}, {}])] == ["a"]  # null is not absent


def test_generations_paired_by_prompt_at_latest_step(two_runs) -> None:
    a, b = (collect_run(str(r)) for r in two_runs)
    pairs, without = pair_generations([a, b])
    assert without == []
    assert [p.prompt for p in pairs] == ["What is 2+2?", HOSTILE]  # the prompts both generated, first run's order
    assert pairs[0].per_run == [(3, ["4"], [1.0]), (5, ["four"], [1.0])]  # not the step-0 "early" ones
    assert pairs[1].per_run[1] == (5, ["B answer"], [1.0])


def test_runs_sharing_a_name_are_named_by_directory(tmp_path: Path) -> None:
    a = make_run(tmp_path / "x", "demo", 1, 1e-6, None)
    b = make_run(tmp_path / "y", "demo", 1, 1e-6, None)
    c = make_run(tmp_path / "z", "lr", 1, 1e-6, None)
    datas = [collect_run(str(r)) for r in (a, b, c)]
    assert run_names(datas) == [str(a), str(b), "lr"]  # same base name "demo" too: the whole path


# ------------------------------------------------------------------------------------------------ the page
def _figures(page: str) -> list[tuple[str, str]]:
    return re.findall(r'<figure class="chart" data-panel="([^"]+)"[^>]*>(.*?)</figure>', page, re.S)


def test_page_config_diff_curves_phases_and_generations(two_runs) -> None:
    comparison, page = build_comparison([str(r) for r in two_runs])
    # config difference: only the keys that differ, flattened, side by side; a key one run lacks shows "(absent)"
    assert [r.key for r in comparison.config_diff] == [
        "actor_rollout_ref.actor.optim.lr",
        "algorithm.note",
        "algorithm.use_kl_in_reward",
        "trainer.experiment_name",
        "trainer.total_training_steps",
    ]
    diff = page[page.index('id="config-diff"') : page.index("</table>", page.index('id="config-diff"'))]
    assert diff.count("<tr>") == 1 + 5 and "data.train_batch_size" not in diff
    assert "<code>1e-06</code>" in diff and "<code>2e-06</code>" in diff and "(absent)" in diff
    assert "<code>&quot;true&quot;</code>" in diff and "<code>true</code>" in diff  # the string "true" is not true
    assert diff.count('class="differs"') == 5  # every value of B differs from A's
    # curves: one curve per run per metric both logged; actor/kl_loss only B logged: listed, not drawn
    panels = dict(_figures(page))
    assert {"Training reward", "Validation (held-out)", "KL", "Entropy", "Policy loss", "Response length"} <= set(
        panels
    )
    assert "Throughput" in panels and "Time per phase" not in panels  # time is the side-by-side table
    for title, svg in panels.items():
        curves = re.findall(r'id="c\d+-curve-r(\d)-k(\d)"', svg)
        keys = {k for _, k in curves}
        assert sorted(curves) == sorted((r, k) for r in "01" for k in keys), (title, curves)
    assert "actor/kl_loss" in page[page.index('id="single-run-metrics"') :]
    assert "actor/kl_loss" not in panels["KL"]
    # legends name the runs by letter and name
    assert "A: lr1" in panels["Entropy"] and "B: lr2" in panels["Entropy"]
    # held-out: each run's last value
    held = page[page.index('id="heldout"') : page.index("</table>", page.index('id="heldout"'))]
    assert "0.2 <span" in held and "0.4 <span" in held and "(step 5)" in held
    # time and throughput side by side: B's step and gen take twice as long, its throughput is twice as high
    phases = page[page.index('id="phases"') : page.index("</table>", page.index('id="phases"'))]
    assert re.search(r"steps logged</td><td class=\"num\">3</td><td class=\"num\">5</td>", phases)
    assert re.search(r"mean step time \(s\)</td><td class=\"num\">2</td><td class=\"num\">4</td>", phases)
    assert re.search(r"tokens / s / rank\)</td><td class=\"num\">100</td><td class=\"num\">200</td>", phases)
    assert "phase gen: mean s" in phases and "phase update_actor: mean s" in phases
    # generations: the two shared prompts, each run's answer in its own column; unshared prompts left out
    gens = page[page.index('id="generations"') : page.index("</table>", page.index('id="generations"'))]
    assert gens.count("<tr>") == 1 + 2 and "only in A" not in gens and "only in B" not in gens
    assert "ground truth" not in gens  # validation generations record none: no empty column
    row = gens[gens.index("What is 2+2?") :].split("</tr>")[0]
    assert row.index("<pre>4</pre>") < row.index("<pre>four</pre>") and "step 3" in row and "step 5" in row
    # statuses from run_info.json; the hostile prompt is text, nothing is fetched
    assert 'data-status="finished"' in page and 'data-status="running"' in page
    assert "B: lr2 is still running" in page
    assert "<script" not in page and "&lt;script&gt;" in page
    assert "<link" not in page and " src=" not in page and re.findall(r"url\((?!#)", page) == []
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids))


def test_three_runs_different_lengths_missing_validation_killed_and_failed(tmp_path: Path, two_runs) -> None:
    c = make_run(tmp_path, "noval", 2, 1e-6, None, finish=False)
    info = json.loads((c / RUN_INFO_FILE).read_text())
    info.update(status="killed", error="killed (no clean exit): process 1 ended without recording an end")
    (c / RUN_INFO_FILE).write_text(json.dumps(info))  # what run_files.reconcile_killed records of a vanished run
    d = make_run(tmp_path, "boom", 1, 1e-6, {"What is 2+2?": "5"}, finish=False)
    _InfoOnly(str(d), "ppo", None, None, plot=False, report=True).finish(1, error="RuntimeError: boom")
    comparison, page = build_comparison([str(two_runs[0]), str(two_runs[1]), str(c), str(d)])
    assert [r.label for r in comparison.runs] == ["A: lr1", "B: lr2", "C: noval", "D: boom"]
    assert comparison.runs_without_generations == ["C: noval"]
    assert 'data-status="killed"' in page and "C: noval was killed (no clean exit)" in page
    assert 'data-status="failed"' in page and "D: boom failed: RuntimeError: boom" in page
    pair = next(p for p in comparison.generations if p.prompt == "What is 2+2?")
    assert pair.per_run[2] is None and pair.per_run[3] == (1, ["5"], [1.0])
    for title, svg in _figures(page):
        runs_drawn = {r for r, _ in re.findall(r'id="c\d+-curve-r(\d)-k(\d)"', svg)}
        assert runs_drawn == {"0", "1", "2", "3"}, title
    assert default_output_name([str(r) for r in (*two_runs, c, d)]) == "compare-lr1-vs-lr2-and-2-more.html"


# ------------------------------------------------------------------------------------------------ the command
def test_cli_writes_the_page_in_the_current_directory(two_runs, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["compare", str(two_runs[0]), str(two_runs[1])]) == 0  # the `verl compare` subcommand
    assert capsys.readouterr().out.strip() == "compare-lr1-vs-lr2.html"
    assert (tmp_path / "compare-lr1-vs-lr2.html").read_text().startswith("<!DOCTYPE html>")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(("compare", "."))] == ["compare-lr1-vs-lr2.html"]


def test_cli_errors_name_the_directory(two_runs, tmp_path: Path, capsys) -> None:
    out = tmp_path / "never.html"
    missing = tmp_path / "missing"
    assert main([str(two_runs[0]), str(missing), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"verl compare: run directory {missing} does not exist"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([str(empty), str(two_runs[1]), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(empty) in err and "is not a run directory: no run_info.json" in err
    assert main([str(two_runs[0]), "-o", str(out)]) == 2
    assert "needs at least two run directories, got 1" in capsys.readouterr().err
    assert main([]) == 2 and not out.exists()


def test_malformed_metrics_line_is_a_warning(two_runs, tmp_path: Path, capsys) -> None:
    metrics = two_runs[1] / "logs" / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + '{"step": 9, "metrics": {"critic/score/mean"\n')
    out = tmp_path / "sub" / "cmp.html"
    out.parent.mkdir()
    assert main([str(two_runs[0]), str(two_runs[1]), "--output", str(out)]) == 0
    captured = capsys.readouterr()
    assert f"B: lr2: {metrics}:" in captured.err and captured.out.strip() == str(out)
    assert 'id="problems"' in out.read_text()


# ------------------------------------------------------------------------------------------------ in a browser
def test_comparison_renders_in_browser(two_runs, tmp_path: Path, browser) -> None:
    out = tmp_path / "cmp.html"
    assert main([str(two_runs[0]), str(two_runs[1]), "-o", str(out)]) == 0
    dom = browser.dump_dom(out)
    # training reward, validation, KL, entropy, policy loss, response length, throughput
    assert len(dom.svg_paths) == 7 and all(n > 5 for n in dom.svg_paths), dom.svg_paths
    assert {"runs", "config-diff", "heldout", "charts", "phases", "generations", "single-run-metrics"} <= dom.ids
    curve_ids = [i for i in dom.ids if "-curve-r" in i]
    assert {i.split("-curve-")[1][:2] for i in curve_ids} == {"r0", "r1"}
    assert dom.tags_in["config-diff"]["tr"] == 1 + 5 and dom.tags_in["generations"]["tr"] == 1 + 2
    assert HOSTILE in dom.text_in["generations"] and dom.tags["script"] == 0
    assert dom.tags_in["generations"]["b"] == 0  # the hostile prompt is not markup
    assert "finished" in dom.text_in["runs"] and "running" in dom.text_in["runs"]
    fetched = [(t, a, v) for t, a, v in dom.attrs if a in ("src", "href") and "://" in v and not v.startswith("#")]
    assert fetched == []
