"""StepProfiler writes Chrome traces for the configured steps only; dump_step_debug summarises a step as JSON."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch

from verl.hardware.profiler import StepProfiler, dump_step_debug, tensor_summary
from verl.protocol import DataProto


def _work() -> None:
    a = torch.ones(8, 8)
    (a @ a).sum()


def test_traces_only_the_configured_steps(tmp_path):
    profiler = StepProfiler(enabled=True, steps=[2], out_dir=str(tmp_path / "prof"))
    for step in (1, 2, 3):
        with profiler.step(step):
            _work()
    assert profiler.traces == [str(tmp_path / "prof" / "step_2.json")]
    assert sorted(os.listdir(tmp_path / "prof")) == ["step_2.json"]
    trace = json.loads((tmp_path / "prof" / "step_2.json").read_text())
    names = {event.get("name") for event in trace["traceEvents"]}
    assert "aten::mm" in names


def test_disabled_profiler_writes_nothing_and_empty_steps_mean_all(tmp_path):
    off = StepProfiler(enabled=False, steps=[1], out_dir=str(tmp_path / "off"))
    with off.step(1):
        _work()
    assert off.traces == [] and not (tmp_path / "off").exists()
    every = StepProfiler(enabled=True, steps=[], out_dir=str(tmp_path / "all"))
    assert every.should_profile(1) and every.should_profile(7)


def test_trace_is_written_even_when_the_step_raises(tmp_path):
    profiler = StepProfiler(enabled=True, steps=[4], out_dir=str(tmp_path))
    with pytest.raises(RuntimeError, match="boom"):
        with profiler.step(4):
            _work()
            raise RuntimeError("boom")
    assert os.path.isfile(tmp_path / "step_4.json")


def test_from_config_reads_the_trainer_switches(tmp_path):
    from verl.trainer.config import load_config

    cfg = load_config(["trainer.enable_profiling=true", "trainer.profile_steps=[3]"])
    profiler = StepProfiler.from_config(cfg.trainer, str(tmp_path))
    assert profiler.enabled and not profiler.should_profile(2) and profiler.should_profile(3)
    assert not StepProfiler.from_config(load_config([]).trainer, str(tmp_path)).should_profile(1)


def test_tensor_summary_statistics_by_hand():
    s = tensor_summary(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert s["shape"] == [2, 2] and s["dtype"] == "float32"
    assert (s["min"], s["max"], s["mean"]) == (1.0, 4.0, 2.5)
    assert s["std"] == pytest.approx(math.sqrt(1.25))  # population std of 1..4
    assert s["nan_count"] == 0 and s["inf_count"] == 0
    with_nan = tensor_summary(torch.tensor([1.0, float("nan"), float("inf"), 3.0]))
    assert with_nan["nan_count"] == 1 and with_nan["inf_count"] == 1
    assert with_nan["mean"] == 2.0  # over finite values only
    assert tensor_summary(torch.tensor([True, False, False, False]))["true_fraction"] == 0.25


def test_dump_step_debug_writes_strict_json(tmp_path):
    batch = DataProto.from_dict(
        tensors={"responses": torch.tensor([[5, 6, 0], [7, 0, 0]]), "advantages": torch.tensor([[0.5, -0.5, 0.0]] * 2)},
        non_tensors={"uid": np.array(["a", "b"], dtype=object)},
        meta_info={"eos_token_id": 2},
    )
    metrics = {"critic/score/mean": 0.25, "actor/pg_loss": [1.0, 3.0], "bad": float("nan")}
    path = dump_step_debug(batch, metrics, str(tmp_path / "debug"), step=7)
    assert path == str(tmp_path / "debug" / "step_7.json")
    record = json.loads(open(path).read())
    assert record["step"] == 7
    assert record["metrics"] == {"critic/score/mean": 0.25, "actor/pg_loss": 2.0, "bad": "nan"}
    assert record["tensors"]["responses"]["shape"] == [2, 3]
    assert record["tensors"]["responses"]["max"] == 7.0
    assert record["tensors"]["advantages"]["mean"] == 0.0
    assert record["non_tensors"] == {"uid": {"len": 2, "dtype": "object"}}
    assert record["meta_info"] == ["eos_token_id"]
    # plain tensor dicts and no batch at all work too
    dump_step_debug({"x": torch.zeros(3)}, None, str(tmp_path / "debug"), step=8)
    assert json.loads((tmp_path / "debug" / "step_8.json").read_text())["tensors"]["x"]["shape"] == [3]
    with pytest.raises(TypeError, match="DataProto"):
        dump_step_debug([1, 2], {}, str(tmp_path), step=9)
