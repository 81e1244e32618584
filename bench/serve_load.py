"""Load test of the inference service: QPS, latency percentiles, tokens/s, errors and memory vs. concurrent users.

It starts ``python -m verl.serve MODEL`` on 127.0.0.1 (a free port) once per batching mode, then for each user
count, alternating the modes, runs locust headless (``bench/serve_locustfile.py``: users post ``/generate`` back to
back, spawned ``--spawn-rate`` per second) for ``--run-time`` seconds. Figures are steady-state: locust resets its
statistics when all users are running (``--reset-stats``) and tokens/s is the growth of the server's
``verl_serve_generated_tokens_total`` over the same window. Peak server memory comes from
``verl_serve_memory_used_bytes`` sampled every second.

    python bench/serve_load.py                        # 1, 10, 50 users; batching on and off; 45 s each
    python bench/serve_load.py --users 50 --modes batching --engine vllm --run-time 60
    python bench/serve_load.py --smoke                # 2 users, 8 s, tiny random model

Results: ``bench/results/serve_load_<machine>.json`` (the machine, CPU capability included) and a markdown table.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import httpx  # noqa: E402
from _common import BUNDLED_SMOLLM2, markdown_table, save_result  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
LOCUSTFILE = BENCH_DIR / "serve_locustfile.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_metrics(url: str) -> dict[str, float]:
    """The unlabelled samples of the server's ``/metrics``."""
    out: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.split()[:2]
            out[name] = float(value)
    return out


class Server:
    """``python -m verl.serve`` in a subprocess, stopped with SIGINT (clean shutdown)."""

    def __init__(
        self, model: str, engine: str, batching: bool, max_new_tokens: int, log_path: Path, threads: int | None
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "verl.serve", model, "--port", str(self.port), "--engine", engine,
               "--max-new-tokens", str(max_new_tokens), "--max-batch-size", "64", "--log-level", "warning"]  # fmt: skip
        if not batching:
            cmd.append("--no-batching")
        if threads is not None:
            cmd += ["--threads", str(threads)]
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float = 300) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}; see {self.log.name}")
            try:
                r = httpx.get(self.url + "/health", timeout=2)
                if r.status_code == 200:
                    return r.json()
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"the server did not come up in {timeout_s} s; see {self.log.name}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(2)  # SIGINT: uvicorn's graceful shutdown
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class MetricsSampler(threading.Thread):
    """Samples the server's metrics every second: the series of (time, generated tokens) and peak memory."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.samples: list[tuple[float, float]] = []
        self.peak_memory = 0.0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                m = read_metrics(self.url)
                self.samples.append((time.monotonic(), m.get("verl_serve_generated_tokens_total", 0.0)))
                self.peak_memory = max(self.peak_memory, m.get("verl_serve_memory_used_bytes", 0.0))
            except httpx.HTTPError:
                pass
            self._halt.wait(1.0)

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def tokens_per_s(self, since: float) -> float:
        window = [s for s in self.samples if s[0] >= since]
        if len(window) < 2 or window[-1][0] <= window[0][0]:
            return float("nan")
        return (window[-1][1] - window[0][1]) / (window[-1][0] - window[0][0])


def run_locust(url: str, users: int, spawn_rate: float, run_time_s: int, workdir: Path) -> dict[str, Any]:
    """One headless locust run; returns the aggregated row of its stats CSV plus the failures."""
    prefix = workdir / f"u{users}"
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", str(users), "-r",
           str(spawn_rate), "-t", f"{run_time_s}s", "--host", url, "--csv", str(prefix), "--reset-stats",
           "--only-summary", "--loglevel", "WARNING", "--stop-timeout", "30"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=run_time_s + 180)
    stats_path = Path(f"{prefix}_stats.csv")
    if not stats_path.exists():
        raise RuntimeError(f"locust wrote no statistics (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    with open(stats_path) as fh:
        rows = {row["Name"]: row for row in csv.DictReader(fh)}
    agg = rows.get("Aggregated") or rows.get("/generate")
    failures: dict[str, int] = {}
    failures_path = Path(f"{prefix}_failures.csv")
    if failures_path.exists():
        with open(failures_path) as fh:
            for row in csv.DictReader(fh):
                failures[row["Error"][:120]] = int(row["Occurrences"])

    def num(key: str) -> float:
        value = agg.get(key, "") if agg else ""
        return float(value) if value not in ("", "N/A") else float("nan")

    return {
        "requests": int(num("Request Count")) if agg else 0,
        "errors": int(num("Failure Count")) if agg else 0,
        "qps": num("Requests/s"),
        "latency_ms": {p: num(f"{p}%") for p in ("50", "95", "99")},
        "latency_mean_ms": num("Average Response Time"),
        "failures": failures,
    }


def wait_idle(url: str, timeout_s: float = 300) -> None:
    """Wait until the server has nothing queued or running (requests left over from the previous run)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        h = httpx.get(url + "/health", timeout=10).json()
        if h["queue_depth"] == 0 and h["running"] == 0:
            return
        time.sleep(1.0)
    raise TimeoutError(f"{url} still busy after {timeout_s} s")


def measure(url: str, mode: str, engine: str, n: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One locust run of ``n`` users against the server at ``url``; the figures of the module docstring."""
    before = read_metrics(url)
    sampler = MetricsSampler(url)
    sampler.start()
    start = time.monotonic()
    load_before = os.getloadavg()[0]
    result = run_locust(url, n, args.spawn_rate, args.run_time, workdir)
    sampler.stop()
    after = read_metrics(url)
    run = {
        "mode": mode,
        "engine": engine,
        "users": n,
        **result,
        "tokens_per_s": sampler.tokens_per_s(since=start + math.ceil(n / args.spawn_rate)),
        "peak_memory_mib": round(sampler.peak_memory / 2**20, 1),
        "mean_batch_size": _delta(before, after, "verl_serve_batch_size_sum")
        / max(_delta(before, after, "verl_serve_batch_size_count"), 1.0),
        "load_avg_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    print(
        f"[{mode}] {n:>3} users: {run['qps']:.2f} req/s, p50 {run['latency_ms']['50']:.0f} ms, "
        f"p95 {run['latency_ms']['95']:.0f} ms, {run['tokens_per_s']:.1f} tok/s, {run['errors']} errors, "
        f"batch {run['mean_batch_size']:.1f}, load {run['load_avg_1m_before_after']}",
        flush=True,
    )
    return run


def _delta(before: dict[str, float], after: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model", default=BUNDLED_SMOLLM2, help="model dir, bundled name, or config-s (a tiny random Llama)"
    )
    parser.add_argument("--engine", default="hf", choices=["auto", "hf", "vllm"])
    parser.add_argument("--users", default="1,10,50", help="comma-separated user counts")
    parser.add_argument("--modes", default="batching,no-batching", help="batching, no-batching or both")
    parser.add_argument("--spawn-rate", type=float, default=5.0)
    parser.add_argument("--run-time", type=int, default=45, help="seconds of locust per user count")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--server-threads", type=int, default=None, help="the server's torch threads")
    parser.add_argument("--name", default="serve_load", help="result file name under bench/results/")
    parser.add_argument("--smoke", action="store_true", help="2 users, 8 s, a tiny random model")
    args = parser.parse_args(argv)
    users = [int(u) for u in args.users.split(",")]
    modes = [m.strip() for m in args.modes.split(",")]
    if any(m not in ("batching", "no-batching") for m in modes):
        parser.error(f"--modes {args.modes!r}: expected batching and/or no-batching")
    model = args.model
    if args.smoke or model == "config-s":
        from _common import make_config_s_dir

        model = make_config_s_dir()
    if args.smoke:
        users, args.run_time, args.max_new_tokens = [2], 8, 16
    os.environ["VERL_LOAD_MAX_NEW_TOKENS"] = str(args.max_new_tokens)

    runs: list[dict[str, Any]] = []
    workdir = Path(tempfile.mkdtemp(prefix="verl_serve_load_"))
    # Both servers stay up and the modes alternate for each user count, so the two sides of a comparison are
    # measured minutes apart, not a whole series apart (other work on a shared machine drifts).
    servers = {
        mode: Server(model, args.engine, mode == "batching", args.max_new_tokens, workdir / f"server_{mode}.log",
                     args.server_threads)
        for mode in modes
    }  # fmt: skip
    try:
        health = {}
        for mode, server in servers.items():
            health[mode] = server.wait_ready()
            print(f"[{mode}] serving {health[mode]['model']} ({health[mode]['engine']} engine) on {server.url}")
        for n in users:
            for mode, server in servers.items():
                wait_idle(server.url)
                runs.append(measure(server.url, mode, health[mode]["engine"], n, args, workdir / mode))
    finally:
        for server in servers.values():
            server.stop()

    header = ["mode", "users", "QPS", "p50 ms", "p95 ms", "p99 ms", "tokens/s", "errors", "mean batch", "peak MiB"]
    rows = [
        [r["mode"], r["users"], r["qps"], r["latency_ms"]["50"], r["latency_ms"]["95"], r["latency_ms"]["99"],
         r["tokens_per_s"], r["errors"], r["mean_batch_size"], r["peak_memory_mib"]]
        for r in runs
    ]  # fmt: skip
    print(markdown_table(header, rows))
    import torch

    payload = {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "model": model,
        "engine": args.engine,
        "spawn_rate": args.spawn_rate,
        "run_time_s": args.run_time,
        "max_new_tokens": args.max_new_tokens,
        "server_threads": args.server_threads,
        "runs": runs,
    }
    path = save_result(args.name, payload, smoke=args.smoke, per_machine=True)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
