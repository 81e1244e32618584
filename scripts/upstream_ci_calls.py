"""Run the training commands of upstream verl's own CI (``.github/workflows``) through this project's entry points.

Usage::

    PYTHONPATH=$PWD python scripts/upstream_ci_calls.py /work/.mirror/verl-project+verl/repo
        [--show rejected|refused|unfaithful|all] [--json OUT.json] [--tree DIR]

Upstream's end-to-end scripts (``tests/special_e2e``, many ``examples/``) take their settings from environment
variables, and its workflows run them with one combination each: ``ADV_ESTIMATOR=grpo USE_SHM=True LORA_RANK=32
LOAD_FORMAT=safetensors bash tests/special_e2e/ppo_trainer/run_function_reward.sh``, ``RESUME_MODE=auto ...``,
``STRATEGY=fsdp2 ...``. Those combinations are what upstream itself keeps working, so they are a corpus of real
configurations that the scripts alone, run with their defaults (``scripts/upstream_scripts.py``), do not reach.

For every step of every workflow job, the logical lines (``\\`` continuations joined) that launch training are kept:
those running ``bash``/``sh`` on a script of the tree, or ``-m verl.*``, and the ``export`` lines before them. Nothing
else of the step runs (the workflows also delete directories, install packages and prune Docker). The kept lines
run with the job's and the step's ``env:`` under the recording stubs of ``scripts/upstream_scripts.py``, and ``rm``
records too (GitHub's
``${{ env.X }}`` becomes ``${X}``, any other ``${{ ... }}`` an empty string), from a copy of the upstream tree at
``HEAD`` (``tests``, ``examples``, ``recipe``, the asynchronous trainers' shells; ``git archive``). Every recorded
``-m verl.<module>`` call is then classified as that script does (accepted, faithful, refused, rejected).

A call that several workflows make alike (the GPU, ROCm and Ascend copies of a job) is counted once; the table's
rows are the workflow files, each call counted under the first step that made it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (ROOT, os.path.join(ROOT, "scripts")):
    if path not in sys.path:
        sys.path.insert(0, path)

from upstream_scripts import (  # noqa: E402  (scripts/ is not a package)
    Call,
    _stub_text,
    make_stubs,
    module_call,
    record_calls,
    report,
    run_call,
    snapshot_head,
    upstream_config_lacks,
    upstream_has_module,
)

# folders of the tree a workflow's launch lines read (scripts, the configs they name, the data preprocessors)
TREE_DIRS = ("tests", "examples", "recipe", "verl/experimental", "verl/trainer/config")
_LAUNCH = re.compile(r"(^|[\s;&|(])(bash|sh)\s+\S+\.sh\b|-m\s+verl\.")
_EXPORT = re.compile(r"^\s*export\s+[A-Za-z_][A-Za-z0-9_]*=")
_EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def github_expressions(text: str) -> str:
    """``text`` with GitHub's ``${{ env.X }}`` as the shell's ``${X}`` and any other ``${{ ... }}`` removed."""

    def one(match: re.Match[str]) -> str:
        env = re.fullmatch(r"env\.([A-Za-z_][A-Za-z0-9_]*)", match.group(1))
        return "${" + env.group(1) + "}" if env else ""

    return _EXPRESSION.sub(one, text)


def logical_lines(block: str) -> list[str]:
    """The shell lines of a ``run:`` block with ``\\``-newline continuations joined; comments and blanks dropped."""
    lines: list[str] = []
    pending = ""
    for raw in block.splitlines():
        line = raw.rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        if line.strip() and not line.lstrip().startswith("#"):
            lines.append(line.strip())
    if pending.strip():
        lines.append(pending.strip())
    return lines


def launch_lines(block: str) -> list[str]:
    """The lines of a ``run:`` block that launch training (a script of the tree, or ``-m verl.*``), each with the
    ``export`` lines before it; empty when the block launches nothing."""
    kept: list[str] = []
    launches = False
    for line in logical_lines(github_expressions(block)):
        if _EXPORT.match(line):
            kept.append(line)
        elif _LAUNCH.search(line):
            kept.append(line)
            launches = True
    return kept if launches else []


def _env_values(env: Any) -> dict[str, str]:
    if not isinstance(env, dict):
        return {}
    out = {}
    for key, value in env.items():
        text = "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        # a launcher prefix (UV_RUN: "uv run --frozen --extra vllm ..."): the stubbed uv would swallow the command it
        # runs (`$UV_RUN bash tests/...`), so the command runs under the stubs directly
        out[str(key)] = "" if text.startswith("uv run") else github_expressions(text)
    return out


def workflow_steps(tree: str) -> list[tuple[str, dict[str, str], list[str]]]:
    """``(where, env, lines)`` of every workflow step that launches training: ``where`` is
    ``<workflow file>/<job>: <step name>``, ``env`` the workflow's, job's and step's ``env:`` merged."""
    import yaml

    found = []
    folder = os.path.join(tree, ".github", "workflows")
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if not name.endswith((".yml", ".yaml")):
            continue
        with open(os.path.join(folder, name)) as f:
            doc = yaml.safe_load(f) or {}
        base = _env_values(doc.get("env"))
        for job_name, job in (doc.get("jobs") or {}).items():
            job_env = {**base, **_env_values((job or {}).get("env"))}
            for i, step in enumerate((job or {}).get("steps") or []):
                lines = launch_lines(str(step.get("run") or ""))
                if lines:
                    step_name = str(step.get("name") or f"step {i}").replace("/", "|")
                    where = f"{name}/{job_name}: {step_name}"
                    found.append((where, {**job_env, **_env_values(step.get("env"))}, lines))
    return found


def extract_tree(git_dir: str, dest: str) -> None:
    """``git archive HEAD`` of ``.github`` and :data:`TREE_DIRS` (those that exist) unpacked under ``dest``."""
    names = subprocess.run(
        ["git", "--git-dir", git_dir, "ls-tree", "-r", "--name-only", "HEAD", ".github", *TREE_DIRS],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    tops = sorted({p for p in (".github", *TREE_DIRS) if any(n == p or n.startswith(p + "/") for n in names)})
    archive = subprocess.run(
        ["git", "--git-dir", git_dir, "archive", "--format=tar", "HEAD", *tops], capture_output=True
    )
    archive.check_returncode()
    subprocess.run(["tar", "-x", "-C", dest], input=archive.stdout, check=True)


def measure(git_dir: str, timeout: float, tree: str | None = None) -> tuple[list[Call], list[str], int]:
    """Every distinct ``-m verl.*`` call of the workflows' launch lines, classified; the steps whose lines made no
    such call; and how many calls were made in all (before counting repeats once)."""
    calls: list[Call] = []
    no_call: list[str] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    made = 0
    with tempfile.TemporaryDirectory(prefix="upstream_ci_") as tmp:
        work = tree or os.path.join(tmp, "tree")
        os.makedirs(work, exist_ok=True)
        extract_tree(git_dir, work)
        stub_dir = os.path.join(tmp, "stubs")
        make_stubs(stub_dir, os.path.join(stub_dir, "calls.jsonl"))
        # the e2e scripts delete what they wrote once the (stubbed) run is over, e.g. run_function_reward.sh its
        # custom reward file: rm records instead, so a step run later finds the file and nothing is ever deleted
        with open(os.path.join(stub_dir, "rm"), "w") as f:
            f.write(_stub_text("rm", os.path.join(stub_dir, "calls.jsonl")))
        os.chmod(os.path.join(stub_dir, "rm"), 0o755)
        step_file = os.path.join(work, ".upstream_ci_step.sh")
        for where, env, lines in workflow_steps(work):
            with open(step_file, "w") as f:
                f.write("\n".join(lines) + "\n")
            found = [
                mc
                for rec in record_calls(step_file, work, stub_dir, timeout, env_vars=env)
                if (mc := module_call(rec["argv"]))
            ]
            found = [(m, a) for m, a in found if m.startswith("verl.")]
            if not found:
                no_call.append(where)
            for module, args in found:
                made += 1
                if (module, tuple(args)) in seen:
                    continue
                seen.add((module, tuple(args)))
                call = Call(where, module, args)
                run_call(call, work)
                if call.reason.startswith("module ") and not upstream_has_module(git_dir, module):
                    call.reason += " (upstream's own tree has no such module either: the step is stale upstream)"
                elif upstream_config_lacks(git_dir, call.reason):
                    call.reason += " (upstream's own config refuses it too: the step is stale upstream)"
                calls.append(call)
    return calls, no_call, made


def main(argv: list[str] | None = None) -> int:
    """Measure each given upstream verl snapshot's CI calls; prints the tables (every call as JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("git_dirs", nargs="+", help="upstream verl git directories (e.g. /work/.mirror/.../repo)")
    parser.add_argument("--top", type=int, default=25, help="blocking keys listed")
    shows = ["none", "all", "rejected", "refused", "accepted", "faithful", "unfaithful"]
    parser.add_argument("--show", default="none", choices=shows, help="list the calls of one class (or all)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per step run with the stubs")
    parser.add_argument("--json", help="write every classified call to this file")
    parser.add_argument("--tree", help="extract the upstream tree here and keep it (the calls name files in it)")
    args = parser.parse_args(argv)
    dump: dict[str, Any] = {}
    for git_dir in args.git_dirs:
        tree = os.path.join(args.tree, os.path.basename(os.path.dirname(git_dir.rstrip("/")))) if args.tree else None
        calls, no_call, made = measure(git_dir, args.timeout, tree)
        head = snapshot_head(git_dir)
        # a row per workflow file: report() groups by the folder of each call's "script"
        label = f"{git_dir} ({head}): {len(calls)} distinct calls of {made} made by the workflows' steps"
        sys.stdout.write(report(label, calls, no_call, 1, args.top, args.show) + "\n")
        dump[git_dir] = {"head": head, "calls": [asdict(c) for c in calls], "no_call": no_call, "tree": tree}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dump, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
