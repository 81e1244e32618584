"""Where am I: the phase of a run, the heartbeat during long phases, the plain progress line of a log, the truncation
figure and hint on the console."""

from __future__ import annotations

import io
import threading
import time

from verl.reporting import ProgressBar, Tracking
from verl.reporting.backends import TRUNCATION_HINT_AT
from verl.reporting.phase import Heartbeat, current_phase, phase
from verl.reporting.progress import format_duration
from verl.trainer.ppo.metric_utils import marked_timer


def test_phases_nest_and_step_timers_are_phases() -> None:
    assert current_phase() is None
    timing: dict[str, float] = {}
    with marked_timer("step", timing):
        assert current_phase()[0] == "training step"
        with marked_timer("gen", timing):
            label, seconds = current_phase()
            assert label == "generating" and 0 <= seconds < 5
        with phase("my own words"):
            assert current_phase()[0] == "my own words"
        assert current_phase()[0] == "training step"
    assert current_phase() is None and set(timing) == {"step", "gen"}


def test_heartbeat_writes_a_line_per_interval_of_a_long_phase() -> None:
    out = io.StringIO()
    with Heartbeat(prefix=lambda: "step 4/12", interval_s=0.2, stream=out, tick_s=0.02):
        with phase("gen"):
            time.sleep(0.5)  # two intervals: two lines
        with phase("reward"):
            time.sleep(0.05)  # shorter than an interval: no line
    lines = out.getvalue().splitlines()
    assert lines == ["progress: step 4/12 · generating... 0 s", "progress: step 4/12 · generating... 0 s"]


def test_heartbeat_on_a_terminal_calls_on_tick_instead_of_writing() -> None:
    seen: list[object] = []
    out = io.StringIO()
    done = threading.Event()

    def tick(now: object) -> None:
        seen.append(now)
        if now is not None:
            done.set()

    with Heartbeat(on_tick=tick, stream=out, tick_s=0.02), phase("update_actor"):
        assert done.wait(2.0)
    assert ("updating actor" in str(seen[-1])) and out.getvalue() == ""


def test_plain_progress_line_in_a_log(capsys) -> None:
    bar = ProgressBar(total=4)  # stderr is not a terminal under pytest: no bar, plain lines
    assert not bar.live and bar.plain
    metrics = {"perf/throughput": 420.04, "response_length/clip_ratio": 0.84, "critic/score/mean": 0.5}
    timers = {"timing_s/step": 12.0, "timing_s/gen": 9.06, "timing_s/update_actor": 2.5}
    bar.update({**metrics, **timers}, step=1)
    line = capsys.readouterr().out.strip()
    assert line.startswith("progress: step 1/4 (25%) · ")
    assert " s/step · mostly generating (9.1 s) · 420.0 tok/s · 84% truncated · " in line
    assert line.endswith(" left")
    assert bar.seconds_left() is not None and bar.seconds_left() >= 0
    bar.update({}, step=4)
    assert capsys.readouterr().out.strip().endswith("· done")
    bar.close()
    assert bar.heartbeat is None


def test_a_switched_off_bar_writes_nothing(capsys) -> None:
    bar = ProgressBar(total=2, disable=True)
    bar.update({"perf/throughput": 1.0}, step=1)
    bar.close()
    assert capsys.readouterr().out == ""


def test_format_duration() -> None:
    assert [format_duration(s) for s in (9, 75, 4000)] == ["9 s", "1 min 15 s", "1 h 06 min"]


def test_console_line_shows_truncation_and_hints_once(capsys) -> None:
    tracker = Tracking("p", "e", "console")
    tracker.log({"critic/score/mean": 0.5, "response_length/clip_ratio": 0.25}, step=1)
    assert capsys.readouterr().out == "step 1 | score 0.5 | truncated 25%\n"
    tracker.log({"critic/score/mean": 0.5, "response_length/clip_ratio": TRUNCATION_HINT_AT + 0.34}, step=2)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "step 2 | score 0.5 | truncated 84%"
    assert out[1].startswith("hint: 84% of this step's responses stopped at the length limit")
    assert "data.max_response_length" in out[1]
    tracker.log({"response_length/clip_ratio": 0.9}, step=3)
    assert capsys.readouterr().out == "step 3 | truncated 90%\n"  # said once per run
    tracker.finish()


def test_distillation_shows_the_task_score_apart(capsys) -> None:
    tracker = Tracking("p", "e", "console")
    tracker.log({"critic/score/mean": 0.1, "distill/task_score/mean": 0.75}, step=1)
    assert capsys.readouterr().out == "step 1 | score 0.1 | task_score 0.75\n"
    tracker.finish()


def test_dropped_rows_notice_names_the_case(tmp_path, caplog) -> None:
    import logging

    from verl.reporting.backends import drop_rows_after

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "metrics": {}}\n')
    with caplog.at_level(logging.WARNING):
        assert drop_rows_after(str(path), -1) == 1
    assert "starting afresh (no checkpoint to resume): removed 1 row an earlier attempt logged" in caplog.text
    assert "step -1" not in caplog.text
    path.write_text('{"step": 1, "metrics": {}}\n{"step": 2, "metrics": {}}\n{"step": 3, "metrics": {}}\n')
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert drop_rows_after(str(path), 1) == 2
    assert "removed 2 rows of steps after 1 (the run resumes from step 1's checkpoint" in caplog.text


def test_a_closed_bar_names_the_run_not_the_last_phase_a_tick_showed() -> None:
    bar = ProgressBar(total=2, desc="SFTTrainer", disable=False, heartbeat_s=3600)
    assert bar.live
    bar._show_phase(("training step", 3.0))  # what the heartbeat shows during a long phase
    assert bar.bar.desc == "SFTTrainer · training step 3 s"
    bar.update(step=2)
    bar.close()  # the bar stays on screen as the run's last line
    assert bar.bar.desc == "SFTTrainer"
