"""Run upstream verl's own CPU unit tests for the surfaces recipes use against this package, and print the pass rate.

    python scripts/upstream_unit_tests.py --mirror /path/to/verl.git [--ref HEAD] [--out /tmp/upstream_tests]
        [--baseline-counts before.json] [--json after.json]

``--mirror`` is a git directory (or checkout) of https://github.com/verl-project/verl. The test files named in
:data:`TEST_FILES` (and the helper files they import) are written with ``git show`` into ``--out``, a scratch folder
that must lie outside this repository (upstream code is never copied into it); each file then runs in its own
``pytest`` process with this checkout first on ``PYTHONPATH``, no GPU (``CUDA_VISIBLE_DEVICES=""``) and the Hugging
Face hub offline. A test file that fails to import counts as failing every ``def test_`` in it; once it imports, its
collected test cases count (parametrised cases included). ``--json`` writes the per-file counts;
``--baseline-counts`` (such a file from another checkout) reports that run's passes over this run's denominators, so
two runs compare on the same test cases. docs/porting_from_verl.md has the figures and the remaining failures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# the surfaces of issue 31 item 5: protocol, algorithms and their registries, rollout correction, metrics, reward
# managers, checkpoint managers, datasets, config dataclasses, tools, agent loops, small utils
TEST_FILES = (
    "tests/test_protocol_on_cpu.py",
    "tests/test_base_config_on_cpu.py",
    "tests/trainer/ppo/test_core_algos_on_cpu.py",
    "tests/trainer/ppo/test_dynamic_policy_losses_on_cpu.py",
    "tests/trainer/ppo/test_loss_aggregation_on_cpu.py",
    "tests/trainer/ppo/test_metric_utils_on_cpu.py",
    "tests/trainer/ppo/test_rollout_corr.py",
    "tests/trainer/ppo/test_rollout_corr_integration.py",
    "tests/trainer/ppo/test_value_loss_normalization_on_cpu.py",
    "tests/trainer/ppo/test_reinforce_pp_multiturn_on_cpu.py",
    "tests/trainer/test_multi_trajectories_advantage_on_cpu.py",
    "tests/trainer/test_constants_ppo_on_cpu.py",
    "tests/workers/reward_manager/test_dapo_on_cpu.py",
    "tests/workers/reward_manager/test_naive_on_cpu.py",
    "tests/workers/reward_manager/test_registry_on_cpu.py",
    "tests/utils/dataset/test_rl_collate_fn_on_cpu.py",
    "tests/utils/dataset/test_rl_dataset_on_cpu.py",
    "tests/utils/dataset/test_multiturn_sft_dataset_on_cpu.py",
    "tests/utils/ckpt/test_checkpoint_cleanup_on_cpu.py",
    "tests/utils/test_torch_functional.py",
    "tests/utils/test_padding_on_cpu.py",
    "tests/utils/test_fs_on_cpu.py",
    "tests/utils/test_import_utils_on_cpu.py",
    "tests/utils/test_config_on_cpu.py",
    "tests/utils/test_tracking_on_cpu.py",
    "tests/utils/debug/test_metrics.py",
    "tests/utils/test_seqlen_balancing.py",
    "tests/single_controller/test_decorator_on_cpu.py",
    "tests/single_controller/base/test_decorator.py",
    "tests/tools/test_function_tool_on_cpu.py",
    "tests/tools/test_mixed_tools_on_cpu.py",
    "tests/experimental/agent_loop/test_call_tool_on_cpu.py",
    "tests/experimental/agent_loop/test_tool_call_id_on_cpu.py",
    "tests/experimental/agent_loop/test_agent_loop_extra_fields_schema_on_cpu.py",
    "tests/experimental/reward_loop/test_rate_limited_reward_manager_on_cpu.py",
    "tests/experimental/reward_loop/test_async_token_bucket_on_cpu.py",
    "tests/experimental/reward_loop/test_math_verify.py",
    "tests/workers/config/test_actor_config_on_cpu.py",
    "tests/workers/config/test_critic_config_on_cpu.py",
    "tests/workers/config/test_optim_config_on_cpu.py",
    "tests/workers/config/test_model_config_on_cpu.py",
)
# files the tests import (package markers and helpers)
SUPPORT_FILES = (
    "tests/__init__.py",
    "tests/trainer/__init__.py",
    "tests/trainer/ppo/__init__.py",
    "tests/tools/__init__.py",
    "tests/tools/_stub_search_tools.py",
    "tests/experimental/__init__.py",
    "tests/experimental/agent_loop/__init__.py",
    "tests/experimental/agent_loop/function_tool_examples.py",
    "tests/experimental/agent_loop/agent_utils.py",
    "tests/experimental/reward_loop/reward_fn.py",
    "tests/utils/_test_module.py",
)


def extract(mirror: Path, ref: str, out: Path) -> None:
    """Write the listed files of ``mirror`` at ``ref`` under ``out``."""
    if REPO in out.resolve().parents or out.resolve() == REPO:
        raise SystemExit(f"--out {out} lies inside this repository; pick a scratch folder outside it")
    for rel in TEST_FILES + SUPPORT_FILES:
        text = subprocess.run(
            ["git", "-C", str(mirror), "show", f"{ref}:{rel}"], capture_output=True, check=True
        ).stdout
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text)


def run_file(out: Path, rel: str, timeout_s: int) -> dict[str, int | bool]:
    """One test file in its own pytest process; its pass / total counts (see the module docstring)."""
    xml = out / "junit" / (rel.replace("/", "_") + ".xml")
    xml.parent.mkdir(exist_ok=True)
    xml.unlink(missing_ok=True)
    env = dict(
        os.environ,
        PYTHONPATH=f"{out}{os.pathsep}{REPO}",
        CUDA_VISIBLE_DEVICES="",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", rel, "--timeout=60"]
    try:
        subprocess.run(cmd, cwd=out, env=env, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        pass
    n_defs = len(re.findall(r"^\s*(?:async )?def test_", (out / rel).read_text(), re.M))
    passed = failed = skipped = 0
    import_error = not xml.exists()
    if xml.exists():
        for case in ET.parse(xml).getroot().iter("testcase"):
            kinds = {c.tag for c in case}
            if "skipped" in kinds:
                skipped += 1
            elif kinds & {"failure", "error"}:
                failed += 1
                import_error |= any("collection failure" in (c.get("message") or "") for c in case)
            else:
                passed += 1
    total = max(n_defs, 1) if import_error else passed + failed
    return {"passed": passed, "total": total, "skipped": skipped, "import_error": import_error}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, required=True, help="git directory or checkout of upstream verl")
    parser.add_argument("--ref", default="HEAD")
    parser.add_argument("--out", type=Path, default=Path("/tmp/upstream_tests"))
    parser.add_argument("--timeout-s", type=int, default=300, help="per test file")
    parser.add_argument("--json", type=Path, help="write the per-file counts here")
    parser.add_argument("--baseline-counts", type=Path, help="per-file counts of another run, to compare")
    args = parser.parse_args(argv)
    extract(args.mirror, args.ref, args.out)
    counts = {}
    for rel in TEST_FILES:
        c = counts[rel] = run_file(args.out, rel, args.timeout_s)
        mark = " (import error)" if c["import_error"] else ""
        print(f"{c['passed']:4d}/{c['total']:<4d} {rel}{mark}", flush=True)
    passed, total = sum(c["passed"] for c in counts.values()), sum(c["total"] for c in counts.values())
    print(f"passed {passed}/{total} = {100 * passed / max(total, 1):.1f}%")
    if args.baseline_counts:
        base = json.loads(args.baseline_counts.read_text())
        base_passed = sum(min(base.get(rel, {}).get("passed", 0), counts[rel]["total"]) for rel in counts)
        print(f"baseline passed {base_passed}/{total} = {100 * base_passed / max(total, 1):.1f}% (same test cases)")
    if args.json:
        args.json.write_text(json.dumps(counts, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
