"""The GPU kit's first stage: what the machine is and whether everything the later stages import is there.

Prints (and writes ``env.json`` into ``--out``): ``nvidia-smi``, Python and the versions of the packages the
stages use with the folder each was imported from (the image's site-packages or the carried wheels' ``/tmp/site``),
verl's config path (``load_config([])``), the bench modules, and a bf16 matrix product on the GPU. Exits non-zero
when an import fails, and when anything imported ``ray`` (the kit carries no ray: the benches run in-process).

    python bench/gpu_kit/env_check.py --out DIR
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# the distributions the stages import: the image's and the carried ones (bench/gpu_kit/wheels.txt)
PACKAGES = (
    "torch", "transformers", "accelerate", "peft", "tokenizers", "safetensors", "huggingface_hub", "numpy",
    "pyarrow", "pandas", "fsspec", "typing_extensions", "tensordict", "omegaconf", "hydra", "antlr4", "pydantic",
    "pydantic_core", "math_verify", "latex2sympy2_extended", "trl", "datasets", "dill", "multiprocess", "pytest",
    "pytest_timeout", "triton",
)  # fmt: skip
MODULES = (
    "verl.trainer.config", "verl.trainer.ppo.ray_trainer", "verl.workers.fsdp_workers", "verl.workers.rollout.decode",
    "verl.tools.schemas", "bench._common", "bench._sides", "bench.decode_speed", "bench.gpu_grpo_vs_trl",
    "bench.logprob_memory", "bench.gpu_kit.profile_step",
)  # fmt: skip


# distribution names of the modules whose name differs (for the version, when the module has no __version__)
DISTRIBUTIONS = {
    "hydra": "hydra-core",
    "antlr4": "antlr4-python3-runtime",
    "typing_extensions": "typing-extensions",
    "math_verify": "math-verify",
    "pytest_timeout": "pytest-timeout",
    "pydantic_core": "pydantic-core",
}


def _module_info(name: str) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    try:
        module = importlib.import_module(name)
    except Exception as err:  # every failure is reported, none stops the check
        return {"ok": False, "error": f"{type(err).__name__}: {err}"}
    found = getattr(module, "__version__", None)
    if not isinstance(found, str) and "." not in name:
        try:
            found = version(DISTRIBUTIONS.get(name, name))
        except PackageNotFoundError:
            found = None
    return {"ok": True, "version": found, "from": os.path.dirname(getattr(module, "__file__", "") or "") or None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=".")
    args = parser.parse_args(argv)
    report: dict = {"python": sys.version, "executable": sys.executable, "platform": platform.platform()}
    report["PYTHONPATH"] = os.environ.get("PYTHONPATH")
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True)
        report["nvidia_smi"] = smi.stdout + smi.stderr
        print(report["nvidia_smi"])
    else:
        report["nvidia_smi"] = None
        print("nvidia-smi: not on this machine")
    t0 = time.time()
    report["packages"] = {name: _module_info(name) for name in PACKAGES}
    report["modules"] = {name: _module_info(name) for name in MODULES}
    report["import_s"] = round(time.time() - t0, 1)
    failures = [n for n, i in {**report["packages"], **report["modules"]}.items() if not i["ok"]]
    if "triton" in failures and not shutil.which("nvidia-smi"):
        failures.remove("triton")  # CPU builds of torch come without it
    try:
        from verl.trainer.config import load_config

        load_config([])
        report["load_config"] = "ok"
    except Exception as err:
        report["load_config"] = f"{type(err).__name__}: {err}"
        failures.append("load_config")
    report["ray_imported"] = "ray" in sys.modules
    if report["ray_imported"]:
        failures.append("ray (imported by the kit's path)")

    import torch

    report["cuda"] = torch.cuda.is_available()
    if report["cuda"]:
        props = torch.cuda.get_device_properties(0)
        report["gpu"] = {
            "name": props.name,
            "uuid": str(getattr(props, "uuid", "")),
            "sms": props.multi_processor_count,
            "total_gib": round(props.total_memory / 2**30, 1),
            "capability": list(torch.cuda.get_device_capability(0)),
        }
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            a @ a
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
        report["bf16_matmul_tflops"] = round(10 * 2 * 8192**3 / (time.perf_counter() - start) / 1e12)
    for name, info in {**report["packages"], **report["modules"]}.items():
        where = info.get("from") or ""
        print(
            f"{name:<34} {'ok ' if info['ok'] else 'FAIL'} {info.get('version') or ''} {where or info.get('error', '')}"
        )
    print(f"load_config([]): {report['load_config']}; ray imported: {report['ray_imported']}; CUDA: {report['cuda']}")
    if report["cuda"]:
        print(f"GPU: {report['gpu']}; bf16 8192^3 matmul: {report['bf16_matmul_tflops']} TFLOP/s")
    report["failures"] = failures
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "env.json").write_text(json.dumps(report, indent=1) + "\n")
    if failures:
        print("FAILED: " + ", ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
