"""Tests of verl/reporting/: backends, value conversion, progress bar, rollout dumps."""

from __future__ import annotations

import json
import math
import os
import re
import sys
import types

import numpy as np
import pytest
import torch

from verl.reporting import DapoFilteredRewardTableLogger, ProgressBar, Tracking, dump_rollout_jsonl, to_scalar
from verl.reporting.tables import FILTERED_REWARD_KEY


def _read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_file_backend_roundtrip(tmp_path) -> None:
    tracker = Tracking("proj", "exp", "file", config={"a": {"b": 1}}, log_dir=str(tmp_path))
    tracker.log({"critic/score/mean": 0.25, "count": 3, "t": torch.tensor(1.5), "n": np.float32(2.0)}, step=1)
    tracker.log({"critic/score/mean": float("nan"), "x": float("inf"), "y": -math.inf, "ok": np.int64(7)}, step=2)
    # Flushed per step: readable before finish().
    rows = _read_jsonl(str(tmp_path / "metrics.jsonl"))
    tracker.finish()
    assert rows[0] == {"step": 1, "metrics": {"critic/score/mean": 0.25, "count": 3, "t": 1.5, "n": 2.0}}
    assert rows[1]["metrics"] == {"critic/score/mean": None, "x": None, "y": None, "ok": 7}
    assert rows[1]["nonfinite"] == {"critic/score/mean": "nan", "x": "inf", "y": "-inf"}
    assert json.loads((tmp_path / "config.json").read_text()) == {"a": {"b": 1}}


def test_file_backend_appends_on_resume(tmp_path) -> None:
    with Tracking("p", "e", ["file"], log_dir=str(tmp_path)) as t:
        t.log({"a": 1}, step=1)
    with Tracking("p", "e", ["file"], log_dir=str(tmp_path)) as t:
        t.log({"a": 2}, step=2)
    assert [r["step"] for r in _read_jsonl(str(tmp_path / "metrics.jsonl"))] == [1, 2]


def test_namespace_puts_logs_under_it_and_keeps_keys(tmp_path) -> None:
    tracker = Tracking("p", "e", ["file"], log_dir=str(tmp_path), namespace="team-a")
    tracker.log({"critic/score/mean": 1.0}, step=3)
    tracker.finish()
    path = tmp_path / "team-a" / "metrics.jsonl"
    assert tracker.metrics_path == str(path)
    assert _read_jsonl(str(path)) == [{"step": 3, "metrics": {"critic/score/mean": 1.0}}]
    with pytest.raises(ValueError, match="invalid namespace"):
        Tracking("p", "e", ["file"], log_dir=str(tmp_path), namespace="../x")


def test_tensorboard_backend(tmp_path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = Tracking("p", "e", ["tensorboard"], log_dir=str(tmp_path))
    for step, value in [(1, 0.5), (2, 0.75), (4, -1.0)]:
        tracker.log({"critic/score/mean": value, "perf/throughput": step * 10}, step=step)
    tracker.finish()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {"critic/score/mean", "perf/throughput"}
    events = acc.Scalars("critic/score/mean")
    assert [e.step for e in events] == [1, 2, 4]
    assert [e.value for e in events] == pytest.approx([0.5, 0.75, -1.0])
    assert [e.value for e in acc.Scalars("perf/throughput")] == pytest.approx([10, 20, 40])


def test_console_backend_compact_line(capsys) -> None:
    tracker = Tracking("p", "e", "console")
    tracker.log({"critic/score/mean": 0.5, "perf/throughput": 1234.5678, "other/x": 1}, step=2)
    tracker.log({"foo": 3}, step=3)
    tracker.finish()
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "step 2 | score 0.5 | tok/s 1235"
    assert lines[1] == "step 3 | foo 3"


def test_unknown_backend_lists_supported() -> None:
    with pytest.raises(ValueError, match=r"'nope'.*console, file, tensorboard, wandb, mlflow, swanlab"):
        Tracking("p", "e", ["console", "nope"])


def test_bad_metric_values_are_named(tmp_path) -> None:
    tracker = Tracking("p", "e", ["file"], log_dir=str(tmp_path))
    with pytest.raises(ValueError, match="'actor/lr'"):
        tracker.log({"actor/lr": [1.0, 2.0]}, step=1)
    with pytest.raises(ValueError, match=r"'t'.*shape \(2,\)"):
        tracker.log({"t": torch.ones(2)}, step=1)
    with pytest.raises(ValueError, match="step must be an int"):
        tracker.log({"a": 1.0}, step=1.5)  # type: ignore[arg-type]
    tracker.finish()


def test_to_scalar_types() -> None:
    assert to_scalar("a", True) == 1 and isinstance(to_scalar("a", np.int32(4)), int)
    assert to_scalar("a", np.array(2.5)) == 2.5
    assert to_scalar("a", torch.tensor([3])) == 3


def _fake_wandb(calls: list) -> types.ModuleType:
    mod = types.ModuleType("wandb")
    mod.init = lambda **kw: calls.append(("init", kw)) or object()
    mod.log = lambda data, step: calls.append(("log", dict(data), step))
    mod.finish = lambda exit_code=None: calls.append(("finish", exit_code))
    return mod


def test_wandb_backend_offline_by_default(tmp_path, monkeypatch) -> None:
    calls: list = []
    monkeypatch.setitem(sys.modules, "wandb", _fake_wandb(calls))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    tracker = Tracking("proj", "exp", ["wandb"], config={"lr": 0.1}, log_dir=str(tmp_path), namespace="ns")
    tracker.log({"critic/score/mean": torch.tensor(0.5)}, step=7)
    tracker.finish()
    init = calls[0][1]
    assert init["mode"] == "offline" and init["project"] == "proj" and init["name"] == "exp"
    assert init["config"] == {"lr": 0.1} and init["group"] == "ns"
    assert init["dir"] == os.path.join(str(tmp_path), "ns")
    assert calls[1] == ("log", {"critic/score/mean": 0.5}, 7)
    assert calls[2] == ("finish", 0)


def test_wandb_mode_env_respected(tmp_path, monkeypatch) -> None:
    calls: list = []
    monkeypatch.setitem(sys.modules, "wandb", _fake_wandb(calls))
    monkeypatch.setenv("WANDB_MODE", "online")
    Tracking("p", "e", ["wandb"], log_dir=str(tmp_path)).finish()
    assert "mode" not in calls[0][1]


@pytest.mark.parametrize("name", ["wandb", "mlflow", "swanlab"])
def test_missing_optional_backend_clear_error(tmp_path, monkeypatch, name: str) -> None:
    monkeypatch.setitem(sys.modules, name, None)  # makes `import name` raise ImportError
    with pytest.raises(ImportError, match=f"'{name}' but the {name} package is not installed: pip install") as err:
        Tracking("p", "e", ["file", name], log_dir=str(tmp_path))
    assert "\n" not in str(err.value) and f"drop '{name}' from trainer.logger" in str(err.value)
    assert f"pip install 'verl[{name}]'" in str(err.value)  # each is an optional extra of pyproject.toml


class _FakeText:
    def __init__(self, content, caption=None):
        self.content, self.caption = content, caption


def _fake_swanlab(calls: list) -> types.ModuleType:
    mod = types.ModuleType("swanlab")
    mod.login = lambda api_key: calls.append(("login", api_key))
    mod.init = lambda **kw: calls.append(("init", kw)) or object()
    mod.log = lambda data, step: calls.append(("log", dict(data), step))
    mod.finish = lambda: calls.append(("finish",))
    mod.Text = _FakeText
    return mod


def _clear_swanlab_env(monkeypatch) -> None:
    for var in ("SWANLAB_MODE", "SWANLAB_LOG_DIR", "SWANLAB_API_KEY"):
        monkeypatch.delenv(var, raising=False)


def test_swanlab_backend_offline_under_log_dir(tmp_path, monkeypatch) -> None:
    calls: list = []
    monkeypatch.setitem(sys.modules, "swanlab", _fake_swanlab(calls))
    _clear_swanlab_env(monkeypatch)
    tracker = Tracking("proj", "exp", ["file", "swanlab"], config={"lr": 0.1, "a": {"b": 2}}, log_dir=str(tmp_path))
    tracker.log({"critic/score/mean": torch.tensor(0.5), "count": np.int64(3), "val-core/x@2": float("nan")}, step=7)
    tracker.log_generations([{"input": "q1", "output": "a1", "score": 1.0}], step=7)
    tracker.finish()
    assert [c[0] for c in calls] == ["init", "log", "log", "finish"]  # no login without a key
    init = calls[0][1]
    assert init["project"] == "proj" and init["experiment_name"] == "exp" and init["mode"] == "offline"
    assert init["config"] == {"FRAMEWORK": "verl", "lr": 0.1, "a": {"b": 2}}
    assert init["logdir"] == str(tmp_path / "swanlog") and os.path.isdir(init["logdir"])
    assert "group" not in init
    _, logged, step = calls[1]
    assert step == 7 and logged["critic/score/mean"] == 0.5 and logged["count"] == 3
    assert isinstance(logged["count"], int) and math.isnan(logged["val-core/x@2"])
    _, generations, gen_step = calls[2]
    (text,) = generations["val/generations"]
    assert gen_step == 7 and text.caption == "sample 0"
    assert "input: q1" in text.content and "output: a1" in text.content and "score: 1.0" in text.content
    # the file backend logged the same step alongside
    assert _read_jsonl(str(tmp_path / "metrics.jsonl"))[0]["step"] == 7


def test_swanlab_backend_env_namespace_and_login(tmp_path, monkeypatch) -> None:
    calls: list = []
    monkeypatch.setitem(sys.modules, "swanlab", _fake_swanlab(calls))
    _clear_swanlab_env(monkeypatch)
    monkeypatch.setenv("SWANLAB_MODE", "cloud")
    monkeypatch.setenv("SWANLAB_API_KEY", "k-123")
    monkeypatch.setenv("SWANLAB_LOG_DIR", str(tmp_path / "elsewhere"))
    Tracking("proj", "exp", ["swanlab"], log_dir=str(tmp_path / "logs"), namespace="team-a").finish()
    assert calls[0] == ("login", "k-123")
    init = calls[1][1]
    assert init["mode"] == "cloud" and init["group"] == "team-a" and init["config"] == {"FRAMEWORK": "verl"}
    assert init["logdir"] == str(tmp_path / "elsewhere")
    assert calls[2] == ("finish",)
    # a key but no cloud mode: nothing to log in to
    calls.clear()
    monkeypatch.setenv("SWANLAB_MODE", "local")
    monkeypatch.delenv("SWANLAB_LOG_DIR")
    Tracking("proj", "exp", ["swanlab"], log_dir=str(tmp_path / "logs"), namespace="team-a").finish()
    assert [c[0] for c in calls] == ["init", "finish"]
    assert calls[0][1]["mode"] == "local" and calls[0][1]["logdir"] == str(tmp_path / "logs" / "team-a" / "swanlog")


def test_swanlab_is_a_known_trainer_logger() -> None:
    """The PPO config checks (BACKENDS) take ``swanlab`` and suggest it for a near miss; the offline trainers'
    configs keep the list for their Tracking, which checks against the same BACKENDS."""
    from verl.reporting import SUPPORTED_BACKENDS
    from verl.trainer.config import ConfigError, load_config
    from verl.trainer.config.offline_schema import DPOConfig, KTOConfig, SFTConfig

    assert "swanlab" in SUPPORTED_BACKENDS
    assert load_config(["trainer.logger=[console,swanlab]"]).trainer.logger == ["console", "swanlab"]
    with pytest.raises(ConfigError, match=r"unknown backend 'swanlabs'; supported: .*mlflow, swanlab; did you mean"):
        load_config(["trainer.logger=[console,swanlabs]"])
    # a list quoted into one string (upstream's geo3k NPU script: trainer.logger='["console","wandb"]' inside a
    # double-quoted shell variable) is named as such, with the spelling that works
    with pytest.raises(
        ConfigError, match=r"one string that looks like a list .* write trainer.logger=\[console,wandb\]"
    ):
        load_config(["trainer.logger='[console,wandb]'"])
    for schema in (SFTConfig, DPOConfig, KTOConfig):
        cfg = load_config(["trainer.logger=[console,swanlab]"], config_name=schema.config_name, schema=schema)
        assert list(cfg.trainer.logger) == ["console", "swanlab"]


def test_mlflow_backend_local_store(tmp_path, monkeypatch) -> None:
    calls: list = []
    mod = types.ModuleType("mlflow")
    mod.set_tracking_uri = lambda uri: calls.append(("uri", uri))
    mod.set_experiment = lambda name: calls.append(("experiment", name))
    mod.start_run = lambda run_name, tags: calls.append(("run", run_name, tags))
    mod.log_params = lambda params: calls.append(("params", params))
    mod.log_metrics = lambda metrics, step: calls.append(("metrics", metrics, step))
    mod.end_run = lambda: calls.append(("end",))
    monkeypatch.setitem(sys.modules, "mlflow", mod)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracker = Tracking("proj", "exp", ["mlflow"], config={"a": {"b": 2}}, log_dir=str(tmp_path))
    tracker.log({"val-core/x@2": 1.0}, step=3)
    tracker.finish()
    assert calls[0] == ("uri", "file://" + str(tmp_path / "mlruns"))
    assert calls[1:4] == [("experiment", "proj"), ("run", "exp", None), ("params", {"a.b": "2"})]
    assert calls[4] == ("metrics", {"val-core/x_2": 1.0}, 3)
    assert calls[5] == ("end",)


def test_progress_bar_shows_score_and_throughput() -> None:
    bar = ProgressBar(total=10, disable=False)
    bar.update({"critic/score/mean": 0.25, "perf/throughput": 99.44}, step=3)
    assert bar.bar.n == 3
    assert "score=0.25" in bar.postfix and "tok/s=99.4" in bar.postfix
    bar.update({})
    assert bar.bar.n == 4
    bar.close()


def test_lines_go_above_a_live_bar_and_plain_without_one(capsys) -> None:
    """With a live bar: each line clears the bar first (a carriage return on the bar's stream) and the bar is drawn
    again after it; Python warnings take the same way until the bar closes. Without a bar: plain lines only."""
    import warnings

    from verl.utils.logging_utils import console_write, live_progress_bar_class

    tracker = Tracking("p", "e", "console")
    assert live_progress_bar_class() is None
    tracker.log({"critic/score/mean": 0.5}, step=1)
    first = capsys.readouterr()
    assert first.out == "step 1 | score 0.5\n" and first.err == ""

    original = warnings.showwarning
    bar = ProgressBar(total=3, disable=False, desc="Bar")
    assert live_progress_bar_class() is not None
    assert warnings.showwarning.__name__ == "_show_warning_above_bar"
    capsys.readouterr()
    tracker.log({"critic/score/mean": 0.25}, step=2)
    console_write("a notice", sys.stderr)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("careful", UserWarning, stacklevel=1)
    live = capsys.readouterr()
    assert live.out == "step 2 | score 0.25\n"
    # stderr: the bar cleared ("\r" + blanks + "\r") before each line and redrawn ("\rBar: ...") after it; the
    # step line went to stdout between the first clear and redraw
    assert re.match(r"\r +\r\rBar: ", live.err), repr(live.err)
    assert re.search(r"\r +\ra notice\n\rBar: ", live.err), repr(live.err)
    assert re.search(r"\r +\r[^\r]*UserWarning: careful\n[^\r]*\n\rBar: ", live.err), repr(live.err)  # + source line
    bar.close()
    assert warnings.showwarning is original and live_progress_bar_class() is None
    tracker.finish()


def test_dump_rollout_jsonl(tmp_path) -> None:
    path = dump_rollout_jsonl(
        str(tmp_path / "rollouts"),
        5,
        ["p1", "p2"],
        ["r1", "r2"],
        [1.0, float("nan")],
        extra={"acc": np.array([True, False]), "gt": ["a", "b"]},
    )
    assert path == str(tmp_path / "rollouts" / "5.jsonl")
    rows = _read_jsonl(path)
    assert rows == [
        {"input": "p1", "output": "r1", "score": 1.0, "step": 5, "acc": True, "gt": "a"},
        {"input": "p2", "output": "r2", "score": None, "step": 5, "acc": False, "gt": "b"},
    ]
    with pytest.raises(ValueError, match=r"column 'gt' has 1 rows, expected 2"):
        dump_rollout_jsonl(str(tmp_path), 1, ["a", "b"], ["c", "d"], [0, 1], extra={"gt": ["x"]})


def test_validation_generations_table(tmp_path, capsys) -> None:
    """trainer.log_val_generations: the same N rows every pass (verl's choice), as a table in each backend."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from verl.trainer.ppo.validation import select_generations_to_log

    inputs = [f"prompt {i}" for i in range(10)]
    outputs = [f"answer {i} | with a pipe" for i in range(10)]
    scores = [float(i % 2) for i in range(10)]
    rows = select_generations_to_log(inputs, outputs, scores, n=3)
    assert len(rows) == 3 and len({r["input"] for r in rows}) == 3
    # the choice depends on the set of generations, not on the order they arrived in
    shuffled = select_generations_to_log(inputs[::-1], outputs[::-1], scores[::-1], n=3)
    assert shuffled == rows
    for row in rows:
        i = int(row["input"].split()[1])
        assert row["output"] == outputs[i] and row["score"] == scores[i]

    tracker = Tracking("proj", "exp", ["console", "file", "tensorboard"], log_dir=str(tmp_path))
    tracker.log_generations(rows, step=4)
    tracker.finish()
    logged = _read_jsonl(str(tmp_path / "val_generations.jsonl"))
    assert logged == [{"step": 4, **row} for row in rows]
    assert "step 4 | 3 validation generations" in capsys.readouterr().out
    acc = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0})
    acc.Reload()
    (event,) = acc.Tensors("val/generations/text_summary")
    text = event.tensor_proto.string_val[0].decode()
    assert event.step == 4 and "| input | output | score |" in text and "answer" in text and "\\|" in text
    with pytest.raises(ValueError, match="row 0 lacks"):
        Tracking("proj", "exp", [], log_dir=str(tmp_path)).log_generations([{"input": "x"}], step=1)


def test_keep_through_step_drops_rows_a_resumed_run_redoes(tmp_path):
    log_dir = str(tmp_path)
    with Tracking("p", "e", ["file"], log_dir=log_dir) as first:
        for step in range(4):
            first.log({"x": float(step)}, step=step)
    with open(os.path.join(log_dir, "metrics.jsonl"), "a") as f:
        f.write('{"step": 4, "metr')  # the torn last line of a killed process
    # resumed from the step-2 checkpoint: steps 3 and 4 run again and must not appear twice
    with Tracking("p", "e", ["file"], log_dir=log_dir, keep_through_step=2) as resumed:
        for step in (3, 4):
            resumed.log({"x": 10.0 + step}, step=step)
    rows = [json.loads(line) for line in open(os.path.join(log_dir, "metrics.jsonl"))]
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert rows[3]["metrics"]["x"] == 13.0
    # a fresh run (-1) in the same log directory starts an empty file
    with Tracking("p", "e", ["file"], log_dir=log_dir, keep_through_step=-1) as fresh:
        fresh.log({"x": 0.5}, step=1)
    assert [json.loads(line)["step"] for line in open(os.path.join(log_dir, "metrics.jsonl"))] == [1]


def test_finish_passes_exit_code_to_wandb_once(tmp_path, monkeypatch) -> None:
    calls: list = []
    monkeypatch.setitem(sys.modules, "wandb", _fake_wandb(calls))
    tracker = Tracking("proj", "exp", ["wandb", "file"], log_dir=str(tmp_path))
    tracker.finish(exit_code=1)
    tracker.finish(exit_code=0)
    tracker.log({"x": 1.0}, step=1)  # after finish: nothing is written
    assert [c for c in calls if c[0] != "init"] == [("finish", 1)]
    assert not os.path.exists(tracker.metrics_path) or "x" not in open(tracker.metrics_path).read()


def test_dapo_filtered_reward_table_rows(monkeypatch) -> None:
    logged: list = []

    class _Table:
        def __init__(self, columns, data=None, log_mode=None):
            self.columns, self.rows, self.log_mode = columns, [list(r) for r in data or []], log_mode

        def add_data(self, *row):
            self.rows.append(list(row))

    for version, incremental in (("0.21.0", True), ("0.19.0", False)):
        mod = types.ModuleType("wandb")
        mod.__version__, mod.run, mod.Table = version, object(), _Table
        mod.log = lambda data, step: logged.append((step, [list(r) for r in data[FILTERED_REWARD_KEY].rows]))
        monkeypatch.setitem(sys.modules, "wandb", mod)
        table_logger = DapoFilteredRewardTableLogger()
        table_logger.log(["console", "wandb"], {1.0: 2, 0.0: 3, 0.5: 1}, step=3)
        table_logger.log(["console", "wandb"], {0: 4}, step=4)
        table_logger.log(["console"], {0: 9}, step=5)  # no wandb in trainer.logger: nothing
        assert logged == [(3, [[3, "0:3, 0.5:1, 1:2"]]), (4, [[3, "0:3, 0.5:1, 1:2"], [4, "0:4"]])]
        assert (table_logger._table is not None) is incremental
        logged.clear()


def test_validation_generations_logger_wandb_and_trackio(monkeypatch) -> None:
    from verl.reporting import ValidationGenerationsLogger

    tables, traces = [], []
    wandb = types.ModuleType("wandb")
    wandb.run = object()
    wandb.Table = lambda columns, data: (columns, data)
    wandb.log = lambda data, step: tables.append((step, data["val/generations"]))
    trackio = types.ModuleType("trackio")
    trackio.Trace = lambda messages, metadata: (messages, metadata)
    trackio.log = lambda data, step: traces.append((step, data["val/generations"]))
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    monkeypatch.setitem(sys.modules, "trackio", trackio)
    gen_logger = ValidationGenerationsLogger()
    gen_logger.log(["wandb", "trackio"], [["q1", "a1", 1.0]], step=1)
    gen_logger.log(["wandb"], [["q2", "a2", 0.0], ["q3", "a3", 0.5]], step=2)
    columns, data = tables[-1][1]
    assert columns == ["step", "input_1", "output_1", "score_1", "input_2", "output_2", "score_2"]
    assert data == [[1, "q1", "a1", 1.0, None, None, None], [2, "q2", "a2", 0.0, "q3", "a3", 0.5]]
    (step, [(messages, metadata)]) = traces[0]
    assert step == 1 and messages[1] == {"role": "assistant", "content": "a1"} and metadata["score"] == 1.0


@pytest.mark.parametrize("api", ["has_run", "get_run"])
def test_validation_generations_logger_swanlab(monkeypatch, api: str) -> None:
    """One swanlab.Text per sample while a run is active (newer swanlab: has_run(); older: get_run() or None)."""
    from verl.reporting import ValidationGenerationsLogger

    calls: list = []
    swanlab = _fake_swanlab(calls)
    active = {"run": None}
    if api == "has_run":
        swanlab.has_run = lambda: active["run"] is not None
    else:
        swanlab.get_run = lambda: active["run"]
    monkeypatch.setitem(sys.modules, "swanlab", swanlab)
    gen_logger = ValidationGenerationsLogger()
    gen_logger.log(["swanlab"], [["q1", "a1", 1.0]], step=1)  # no active run: nothing
    assert calls == []
    active["run"] = object()
    gen_logger.log(["console", "swanlab"], [["q1", "a1", 1.0], ["q2", "a2", 0.0]], step=2)
    ((kind, data, step),) = calls
    texts = data["val/generations"]
    assert kind == "log" and step == 2 and [t.caption for t in texts] == ["sample 0", "sample 1"]
    assert "input: q2" in texts[1].content and "output: a2" in texts[1].content and "score: 0.0" in texts[1].content


def test_upstream_logging_environment(tmp_path, monkeypatch) -> None:
    """VERL_FILE_LOGGER_ROOT / _PATH: upstream's {"step", "data"} file beside metrics.jsonl; TENSORBOARD_DIR."""
    import json

    monkeypatch.setenv("VERL_FILE_LOGGER_ROOT", str(tmp_path / "root"))
    tracker = Tracking("proj", "exp", ["file"], log_dir=str(tmp_path / "logs"), keep_through_step=-1)
    tracker.log({"critic/score/mean": 0.5, "x": float("nan")}, step=1)
    tracker.finish()
    lines = (tmp_path / "root" / "proj" / "exp.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"step": 1, "data": {"critic/score/mean": 0.5, "x": None}}]
    assert (tmp_path / "logs" / "metrics.jsonl").is_file()  # ours, as always
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "one.jsonl"))  # the path wins over the root
    tracker = Tracking("p", "e", ["file"], log_dir=str(tmp_path / "l2"), upstream_names=lambda k: f"train/{k}")
    tracker.log({"loss": 1.0}, step=3)
    tracker.finish()
    assert json.loads((tmp_path / "one.jsonl").read_text()) == {"step": 3, "data": {"train/loss": 1.0}}
    monkeypatch.delenv("VERL_FILE_LOGGER_PATH")
    monkeypatch.delenv("VERL_FILE_LOGGER_ROOT")
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    tracker = Tracking("p", "e", ["tensorboard"], log_dir=str(tmp_path / "l3"))
    tracker.log({"loss": 1.0}, step=1)
    tracker.finish()
    assert any(n.startswith("events.out.tfevents") for n in os.listdir(tmp_path / "tb"))
    assert not (tmp_path / "l3" / "tensorboard").exists()
