"""Third-party loggers are quiet by default (errors kept, warnings collapsed into one summary line, intended notices
dropped) and come back in full at a chosen level."""

from __future__ import annotations

import logging

import pytest

from verl.utils import logging_utils
from verl.utils.logging_utils import quiet_third_party_logs


@pytest.fixture
def restore_loggers(monkeypatch):
    monkeypatch.setattr(logging_utils, "_FILTER", logging_utils._OncePerMessage())
    monkeypatch.setattr(logging_utils, "_STATE", {"level": "unset", "atexit": True})
    monkeypatch.delenv("VERL_THIRD_PARTY_LOG_LEVEL", raising=False)
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "INFO")  # both restored by monkeypatch afterwards
    monkeypatch.setenv("VLLM_CONFIGURE_LOGGING", "1")
    names = logging_utils.THIRD_PARTY_LOGGERS
    saved = {
        n: (logging.getLogger(n).level, list(logging.getLogger(n).handlers), logging.getLogger(n).propagate)
        for n in names
    }
    yield
    for n, (level, handlers, propagate) in saved.items():
        lg = logging.getLogger(n)
        lg.setLevel(level)
        lg.handlers[:] = handlers
        lg.propagate = propagate


def test_quiet_keeps_errors_and_collapses_warnings_into_one_line(restore_loggers, capsys, caplog) -> None:
    logging.getLogger("vllm").handlers[:] = []
    logging.getLogger("transformers").handlers[:] = []
    quiet_third_party_logs(None)
    child = logging.getLogger("vllm.v1.worker.cpu_worker")  # records from children pass the handler's filter
    child.info("Reloading weights inplace...")
    for step in range(3):
        child.warning("CPU backend doesn't allow to use `torch.set_num_threads` after the thread binding, skip it.")
        logging.getLogger("vllm.model_executor.layerwise").warning("ParallelLMHead: Failed to load weights")
        child.warning("KV cache is %d%% full", 90 + step)
    logging.getLogger("vllm.model_executor.models.utils").warning(
        "Attempted to load weight norm.weight with dtype torch.float32 into parameter with dtype torch.bfloat16"
    )
    logging.getLogger("transformers.modeling_utils").warning("a transformers notice")
    child.error("engine died")
    text = capsys.readouterr().err  # the handler writes to the live sys.stderr
    assert "Reloading weights" not in text  # INFO dropped
    assert "set_num_threads" not in text and "Failed to load weights" not in text  # intended behaviour dropped
    assert "KV cache is" not in text and "Attempted to load" not in text  # warnings held back
    assert "engine died" in text  # errors shown
    assert logging_utils._FILTER.repeats == 2  # the same KV warning (numbers aside) twice more

    with caplog.at_level(logging.INFO, logger="verl"):
        line = logging_utils.summarize_hidden_warnings()
    assert line is not None and line.startswith("5 third-party warnings hidden (vllm 4, transformers 1; e.g. ")
    assert "KV cache is 90% full" in line and "trainer.third_party_log_level=WARNING shows each" in line
    assert [r.getMessage() for r in caplog.records if r.name == "verl"] == [line]
    assert logging_utils.summarize_hidden_warnings() is None  # said once; later warnings make a new line
    child.warning("late warning")
    assert logging_utils.summarize_hidden_warnings().startswith("1 third-party warning hidden (vllm 1; ")
    child.warning("KV cache is %d%% full", 99)  # a repeat of one summarised before is this line's example
    assert "e.g. 'vllm.v1.worker.cpu_worker: KV cache is 99% full'" in logging_utils.summarize_hidden_warnings()


def test_warning_level_shows_each_warning(restore_loggers, caplog) -> None:
    logging.getLogger("vllm").handlers[:] = []
    quiet_third_party_logs("WARNING")  # no handler of its own: records reach the root's (here: pytest's)
    for _ in range(2):
        logging.getLogger("vllm.model_executor.models.utils").warning("Attempted to load weight x")
    assert [r.getMessage() for r in caplog.records].count("Attempted to load weight x") == 2
    assert logging_utils.summarize_hidden_warnings() is None


def test_a_level_brings_everything_back(restore_loggers) -> None:
    logging.getLogger("vllm").handlers[:] = []
    quiet_third_party_logs(None)
    quiet_third_party_logs("INFO")
    lg = logging.getLogger("vllm")
    assert lg.level == logging.INFO
    assert not [h for h in lg.handlers if isinstance(h, logging_utils._QuietHandler)]
    assert all(logging_utils._FILTER not in h.filters for h in lg.handlers)
    assert logging_utils.current_third_party_level() == "INFO"
