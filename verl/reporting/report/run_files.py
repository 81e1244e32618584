"""What a training run writes into its run directory for the report, and the hook the trainers call.

::

    <run_dir>/                      the trainer's checkpoint directory (default_local_dir[/namespace])
        run_info.json               kind, status (running / finished / stopped / failed / killed), pid, times, ...
        config.yaml                 the resolved config of the run (interpolations filled)
        step_plan.json              PPO family: what one step consumes (verl/trainer/config/step_plan.py)
        samples.jsonl               PPO family: training samples at chosen steps (prompt, response, score, ...)
        logs/metrics.jsonl          the ``file`` logger's metrics (another place with trainer.log_dir)
        metrics.png                 the panels of verl/reporting/plotting.py
        report.html                 the report, rebuilt from the files above (python -m verl.reporting.report)

:class:`RunReporter` writes them: :meth:`~RunReporter.start` when training starts, :meth:`~RunReporter.update` after
each checkpoint save and :meth:`~RunReporter.finish` at the end. Every write is atomic, and a failure to draw or
render is logged as a warning, never raised: a report must not end a training run.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import platform
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from verl.utils.fs import atomic_write_text, makedirs

logger = logging.getLogger(__name__)

RUN_INFO_FILE = "run_info.json"
CONFIG_FILE = "config.yaml"
SAMPLES_FILE = "samples.jsonl"
STEP_PLAN_FILE = "step_plan.json"
REPORT_FILE = "report.html"
PLOT_FILE = "metrics.png"
STATUSES = ("running", "finished", "stopped", "failed", "killed")
# what run_info.json says of a run whose process vanished while "running" (the kernel's OOM killer, SIGKILL)
KILLED_ERROR = (
    "killed (no clean exit): process {pid} ended without recording an end, at or after step {step}; most likely the "
    "kernel's out-of-memory killer (see `dmesg`) or a SIGKILL. Run the same command again to resume from the last "
    "checkpoint"
)


def now_iso() -> str:
    """The current local time as ISO 8601 with the UTC offset, to the second."""
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe_hardware(device: str = "auto", dtype: str = "auto", ranks: int = 1) -> dict[str, Any]:
    """What the run trains on, as the driver sees it: device kind and name (GPU name or CPU model), the CPU
    instruction set torch dispatches to, the compute dtype ``dtype`` resolves to (and why), ranks, versions."""
    import torch

    from verl.utils.device import get_device_name

    try:
        device_kind = get_device_name(device)
    except (RuntimeError, ValueError) as err:
        device_kind = f"{device} ({err})"
    info: dict[str, Any] = {
        "device": device_kind,
        "cpu": _cpu_model(),
        "cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
        "cpu_count": os.cpu_count(),
        "ranks": int(ranks),
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    if device_kind == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_count"] = torch.cuda.device_count()
    try:
        from verl.hardware.precision import precision_for, resolve_dtype_name

        info["dtype"] = resolve_dtype_name(str(dtype), device_kind if device_kind in ("cpu", "cuda") else "cpu")
        if str(dtype) == "auto":
            info["dtype_reason"] = precision_for(device_kind if device_kind in ("cpu", "cuda") else "cpu").reason
    except (ValueError, RuntimeError) as err:
        info["dtype"] = f"{dtype} ({err})"
    try:
        from verl.version import __version__

        info["verl"] = __version__
    except ImportError:  # pragma: no cover - the package always has a version
        pass
    return info


def _process_start_ticks(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22): with the pid it
    names one process even after the pid is reused; None where there is no ``/proc``."""
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="utf-8") as f:
            text = f.read()
    except (OSError, ValueError):
        return None
    fields = text.rsplit(")", 1)[-1].split()  # after the command name, which may hold spaces
    return fields[19] if len(fields) > 19 else None


def process_alive(pid: int, start_ticks: str | None = None) -> bool:
    """Whether process ``pid`` (started at ``start_ticks``, when recorded) is still running on this host."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    except (OSError, ValueError, OverflowError):
        return False
    if start_ticks is not None:
        now = _process_start_ticks(int(pid))
        if now is not None and now != str(start_ticks):
            return False  # the pid was reused by another process
    return True


def reconcile_killed(run_dir: str, write: bool = True) -> dict[str, Any]:
    """``run_info.json`` of ``run_dir``, with a ``running`` status whose process is gone (same host, recorded pid no
    longer alive) turned into ``killed`` and :data:`KILLED_ERROR` (written back when ``write``). ``{}`` when there is
    no readable ``run_info.json``; unchanged when the run is alive, ended cleanly, or ran on another host."""
    path = os.path.join(run_dir, RUN_INFO_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(info, dict) or info.get("status") != "running" or info.get("pid") is None:
        return info if isinstance(info, dict) else {}
    if info.get("host") not in (None, socket.gethostname()):
        return info
    if process_alive(int(info["pid"]), info.get("pid_start")):
        return info
    info["status"] = "killed"
    info["error"] = KILLED_ERROR.format(pid=info["pid"], step=info.get("global_step", 0))
    info["finished_at"] = None
    if write:
        try:
            atomic_write_text(path, json.dumps(_jsonable(info), indent=2) + "\n")
        except OSError as err:
            logger.warning("cannot record the killed run in %s: %s", path, err)
    return info


def _drop_sample_rows_after(path: str, step: int) -> None:
    """Keep the rows of ``path`` up to ``step``: a resumed run logs the later steps again."""
    if not os.path.isfile(path):
        return
    kept = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                row_step = int(json.loads(line).get("step", 0))
            except (ValueError, AttributeError):
                row_step = 0  # a damaged line stays for the report to point at
            if row_step <= step:
                kept.append(line if line.endswith("\n") else line + "\n")
    atomic_write_text(path, "".join(kept))


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if hasattr(value, "tolist"):
        return _jsonable(value.tolist())
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)


class RunReporter:
    """Keeps ``metrics.png`` and ``report.html`` of one run current (see the module docstring).

    Args:
        run_dir: the run's checkpoint directory; everything is written there.
        kind: the trainer kind (``ppo``, ``sft``, ``dpo``, ``kto``): which panels
            (verl/reporting/plotting.py PANELS).
        config: the run's config (DictConfig or mapping), written resolved to ``config.yaml``.
        metrics_path: the ``metrics.jsonl`` of the ``file`` logger, or None when that logger is off.
        plot / report: write ``metrics.png`` / ``report.html`` (``trainer.plot``, ``trainer.report.enable``).
        hardware: :func:`describe_hardware` of the run; ``extra``: more ``run_info.json`` fields (algorithm, ...).
    """

    def __init__(
        self,
        run_dir: str,
        kind: str,
        config: Any = None,
        metrics_path: str | None = None,
        plot: bool = True,
        report: bool = True,
        hardware: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.run_dir = str(run_dir)
        self.kind = kind
        self.config = config
        self.metrics_path = metrics_path
        self.plot = bool(plot)
        self.report = bool(report)
        self.hardware = dict(hardware or {})
        self.extra = dict(extra or {})
        self.info: dict[str, Any] = {}

    @property
    def enabled(self) -> bool:
        return self.plot or self.report

    def path(self, name: str) -> str:
        return os.path.join(self.run_dir, name)

    # ------------------------------------------------------------------------------------------------ writes
    def start(self, resumed_step: int | None = None) -> None:
        """Write ``config.yaml`` and ``run_info.json`` (status ``running``). ``resumed_step``: the step a resumed run
        continues from; samples logged after it are dropped (those steps run again) and the first start time kept."""
        if not self.enabled:
            return
        makedirs(self.run_dir)
        previous = reconcile_killed(self.run_dir)
        if previous.get("status") == "killed":  # the run before this one died without a word: say so once
            logger.warning("the previous run in %s was %s", self.run_dir, previous.get("error"))
            print(f"[verl] warning: the previous run in {self.run_dir} was {previous.get('error')}", flush=True)
        started = previous.get("started_at") if resumed_step else None
        self.info = {
            "kind": self.kind,
            **self.extra,
            "status": "running",
            "pid": os.getpid(),
            "pid_start": _process_start_ticks(os.getpid()),
            "host": socket.gethostname(),
            "started_at": started or now_iso(),
            "updated_at": now_iso(),
            "finished_at": None,
            "stopped_by": None,
            "error": None,
            "global_step": int(resumed_step or 0),
            "metrics_file": self._relative(self.metrics_path),
            "hardware": self.hardware,
        }
        if previous.get("status") == "killed":
            self.info["previous_exit"] = previous.get("error")
        if resumed_step:
            self.info["resumed_from_step"] = int(resumed_step)
            self.info["resumed_at"] = [*previous.get("resumed_at", []), now_iso()]
        self._write_info()
        if self.config is not None:
            atomic_write_text(self.path(CONFIG_FILE), _config_yaml(self.config))
        _drop_sample_rows_after(self.path(SAMPLES_FILE), int(resumed_step or 0))

    def record_samples(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        """Append ``rows`` (``prompt``, ``response``, ``score``, ``ground_truth``, ...) of training ``step`` to
        ``samples.jsonl``."""
        if not self.report or not rows:
            return
        makedirs(self.run_dir)
        with open(self.path(SAMPLES_FILE), "a", encoding="utf-8") as f:
            for row in rows:
                record = {"step": int(step), "split": "train", **{k: _jsonable(v) for k, v in row.items()}}
                f.write(json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n")

    def update(self, step: int, status: str = "running", redraw_plot: bool = True, **fields: Any) -> None:
        """Record ``step`` and ``status`` (and ``fields``) in ``run_info.json``, redraw ``metrics.png`` (unless
        ``redraw_plot`` is False: nothing new was logged) and rebuild ``report.html``."""
        if not self.enabled:
            return
        if status not in STATUSES:
            raise ValueError(f"status {status!r}: expected one of {STATUSES}")
        try:
            if not self.info:
                self.info = self._read_info() or {"kind": self.kind, "started_at": now_iso(), **self.extra}
            self.info.update(fields)
            self.info.update({"status": status, "global_step": int(step), "updated_at": now_iso()})
            if status != "running":
                self.info["finished_at"] = self.info["updated_at"]
            hf_dir = self.path("hf_model")
            self.info["hf_export"] = "hf_model" if os.path.isfile(os.path.join(hf_dir, "config.json")) else None
            self._write_info()
            self._draw(redraw_plot)
        except Exception as err:  # noqa: BLE001 - a report must never end a training run
            logger.warning("updating the run report in %s failed: %s", self.run_dir, err, exc_info=True)

    def finish(self, step: int, stopped_by: str | None = None, error: str | None = None) -> None:
        """The final update: status ``failed`` with ``error``, ``stopped`` with ``stopped_by``, else ``finished``."""
        status = "failed" if error else ("stopped" if stopped_by else "finished")
        self.update(step, status, stopped_by=stopped_by, error=error)

    # ------------------------------------------------------------------------------------------------ helpers
    def _draw(self, redraw_plot: bool = True) -> None:
        from verl.reporting.plotting import plot_run

        metrics = self.metrics_path
        if self.plot and redraw_plot:
            if metrics and os.path.isfile(metrics):
                plot_run(metrics, self.path(PLOT_FILE), self.kind, title=self._title())
            else:
                logger.info("no %s: the 'file' logger is off (trainer.logger), so there are no metrics", PLOT_FILE)
        if self.report:
            from verl.reporting.report import write_report

            write_report(self.run_dir)

    def _title(self) -> str:
        name = self.extra.get("experiment") or os.path.basename(os.path.normpath(self.run_dir))
        algorithm = self.extra.get("algorithm")
        return f"{name} ({algorithm})" if algorithm and algorithm != self.kind else str(name)

    def _relative(self, path: str | None) -> str | None:
        if not path:
            return None
        rel = os.path.relpath(os.path.abspath(path), os.path.abspath(self.run_dir))
        return path if rel.startswith("..") else rel

    def _read_info(self) -> dict[str, Any]:
        try:
            with open(self.path(RUN_INFO_FILE), encoding="utf-8") as f:
                info = json.load(f)
            return info if isinstance(info, dict) else {}
        except (OSError, ValueError):
            return {}

    def _write_info(self) -> None:
        atomic_write_text(self.path(RUN_INFO_FILE), json.dumps(_jsonable(self.info), indent=2) + "\n")


def _config_yaml(config: Any) -> str:
    from omegaconf import DictConfig, OmegaConf

    if isinstance(config, DictConfig):
        try:
            return OmegaConf.to_yaml(config, resolve=True)
        except Exception:  # noqa: BLE001 - an interpolation that cannot resolve here: keep it as written
            return OmegaConf.to_yaml(config, resolve=False)
    return OmegaConf.to_yaml(OmegaConf.create(_jsonable(config)))
