"""Run upstream verl's own CPU unit tests for the surfaces recipes use against this package, and print the pass rate.

    python scripts/upstream_unit_tests.py --mirror /path/to/verl.git [--ref HEAD] [--out /tmp/upstream_tests]
        [--baseline-counts before.json] [--json after.json] [--only test_torch_functional]

``--mirror`` is a git directory (or checkout) of https://github.com/verl-project/verl. The test files named in
:data:`TEST_FILES` (and the helper files they import) are written with ``git show`` into ``--out``, a scratch folder
that must lie outside this repository (upstream code is never copied into it); each file then runs in its own
``pytest`` process with this checkout first on ``PYTHONPATH``, no GPU (``CUDA_VISIBLE_DEVICES=""``) and the Hugging
Face hub offline. A test file that fails to import counts as failing every ``def test_`` in it; once it imports, its
collected test cases count (parametrised cases included). ``--json`` writes the per-file counts;
``--baseline-counts`` (such a file from another checkout) reports that run's passes over this run's denominators, so
two runs compare on the same test cases. :data:`EXCLUDED` names the test cases left out of the count (a GPU, model
files or the network needed, or a behaviour this project chooses to differ in), each with its reason; they are
deselected (``--deselect``, a node-id prefix) unless ``--no-exclusions``. docs/porting_from_verl.md has the figures
and the remaining failures.
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
_CORR_INTEGRATION = "tests/trainer/ppo/test_rollout_corr_integration.py::TestRolloutISIntegration"
_ROLLOUT_N = (
    "deliberate: builds ActorConfig(ppo_micro_batch_size=2) on upstream's default ppo_micro_batch_size_per_gpu=None; "
    "the default here is 32 (the packaged YAML's), so upstream's own 'set both' rule refuses it"
)
_ACTOR_YAML = (
    "composes upstream's verl/trainer/config/actor/*.yaml from the working directory; the config here is one "
    "packaged YAML (verl/trainer/config/ppo_trainer.yaml)"
)
# test cases not counted: node-id prefix -> why (one line each)
EXCLUDED: dict[str, str] = {
    "tests/utils/test_seqlen_balancing.py::test_seqlen_balancing_distributed_params": (
        "needs GPUs: spawns ranks that call set_device and join an NCCL group"
    ),
    "tests/utils/test_torch_functional.py::test_distributed_mean_max_min_std": (
        "needs GPUs: spawns 2 and 4 ranks that call set_device(rank) and join an NCCL group"
    ),
    "tests/utils/test_torch_functional.py::test_distributed_masked_mean": (
        "needs GPUs: spawns 2 and 4 ranks that call set_device(rank) and join an NCCL group"
    ),
    "tests/utils/dataset/test_rl_dataset_on_cpu.py": (
        "needs tokenizers / processors under ~/models (upstream's CI downloads them); patches private RLHFDataset "
        "methods"
    ),
    "tests/utils/dataset/test_multiturn_sft_dataset_on_cpu.py": "needs tokenizers under ~/models and torchdata",
    "tests/utils/test_fs_on_cpu.py": (
        "deliberate: copy_to_local caches remote files atomically through fsspec under a sanitised name (no md5 "
        "folder, no always_recopy); the other case patches private helpers"
    ),
    "tests/utils/test_config_on_cpu.py::TestPrintCfgCommand": "runs upstream's scripts/print_cfg.py file",
    "tests/test_protocol_on_cpu.py::test_tensor_dict_constructor": (
        "deliberate: DataProto.from_dict(num_batch_dims=2) without non-tensors is allowed here"
    ),
    "tests/test_protocol_on_cpu.py::test_dataproto_unfold_column_chunks": (
        "deliberate: unfold_column_chunks keeps list columns 1-D (docs/porting_from_verl.md)"
    ),
    "tests/trainer/ppo/test_metric_utils_on_cpu.py::TestComputeTimingMetrics": (
        "patches upstream's private _compute_response_info"
    ),
    "tests/trainer/ppo/test_rollout_corr.py::test_exact_icepop_zeroes_weights_without_changing_mask": (
        "deliberate: rollout_corr/rollout_is_std and _eff_sample_size are over the IS units before truncation "
        "(rollout_corr_helper.compute_is_metrics gives v0.9's)"
    ),
    "tests/test_base_config_on_cpu.py::test_getitem_success": (
        "deliberate: BaseConfig is a read-only typed Mapping; attributes are not set on it after construction"
    ),
    "tests/test_base_config_on_cpu.py::test_getitem_nonexistent_attribute": (
        "deliberate: a missing key of the BaseConfig Mapping is a KeyError (an AttributeError upstream)"
    ),
    f"{_CORR_INTEGRATION}::test_policy_loss_with_rollout_is": _ROLLOUT_N,
    f"{_CORR_INTEGRATION}::test_metrics_only_mode": _ROLLOUT_N,
    f"{_CORR_INTEGRATION}::test_exact_icepop_matches_filtered_weighted_ppo_loss": _ROLLOUT_N,
    "tests/experimental/reward_loop/test_rate_limited_reward_manager_on_cpu.py": (
        "needs the Qwen2.5 tokenizer under ~/models (with the bundled smollm2-135m-instruct tokenizer in its place "
        "all 13 cases pass, in 73 s: the TPM case waits 39 s)"
    ),
    "tests/experimental/reward_loop/test_math_verify.py": "needs Qwen2.5-1.5B under ~/models and a GPU rollout",
    "tests/experimental/agent_loop/test_call_tool_on_cpu.py": (
        "drives upstream's private ToolAgentLoop._call_tool(call, tools_kwargs, agent_data); the loop here has its "
        "own episode state and reports tool errors as tool messages (docs/agent_loop.md)"
    ),
    "tests/experimental/agent_loop/test_tool_call_id_on_cpu.py::TestToolCallIdOnCpu::"
    "test_processing_tools_state_adds_tool_call_id_to_tool_message": (
        "drives upstream's private token merge (ct_merge_non_assistant_msg, AgentData.prompt_ids); the tool message's "
        "tool_call_id is tested in tests/experimental/agent_loop/test_tool_call_ids.py"
    ),
    "tests/experimental/agent_loop/test_agent_loop_extra_fields_schema_on_cpu.py": (
        "imports upstream's AgentLoopWorker internals (AgentLoopWorker, DictConfigWrap, _InternalAgentLoopOutput); "
        "extra_fields, as_dict and the stable columns: tests/experimental/agent_loop/test_extra_fields.py"
    ),
    "tests/workers/reward_manager/test_naive_on_cpu.py": "imports upstream's private naive._score_timeout",
    "tests/tools/test_mixed_tools_on_cpu.py::test_native_and_function_tools_coexist": (
        "deliberate: a FunctionTool is a BaseTool here (one tool interface)"
    ),
    "tests/workers/config/test_actor_config_on_cpu.py::TestActorConfig::test_actor_config_from_yaml": _ACTOR_YAML,
    "tests/workers/config/test_actor_config_on_cpu.py::TestActorConfig::test_fsdp_actor_config_from_yaml": _ACTOR_YAML,
    "tests/workers/config/test_actor_config_on_cpu.py::TestActorConfig::test_megatron_actor_config_from_yaml": (
        _ACTOR_YAML
    ),
    "tests/tools/test_function_tool_on_cpu.py::test_rollout_yaml_exposes_function_tool_path": (
        "reads upstream's verl/trainer/config/rollout/rollout.yaml file; the config here is one packaged YAML"
    ),
    "tests/tools/test_function_tool_on_cpu.py::test_tool_list_wrap_survives_hydra_instantiate": (
        "deliberate: ToolListWrap shields tool lists from hydra.utils.instantiate of agent loops; the loops here "
        "are built by the agent-loop runner with a {name: tool} dict, not through hydra"
    ),
}
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


def excluded_in(rel: str) -> list[str]:
    """The :data:`EXCLUDED` node-id prefixes inside test file ``rel`` (``[rel]`` when the whole file is)."""
    return [key for key in EXCLUDED if key == rel or key.startswith(rel + "::")]


def run_file(out: Path, rel: str, timeout_s: int, exclusions: bool = True) -> dict[str, int | bool]:
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
    env["PYTHONPATH"] += os.pathsep + str(REPO / "scripts")  # the @pytest.mark.asyncio runner below
    cmd += ["-p", "pytest_asyncio_shim"]  # scripts/pytest_asyncio_shim.py (without pytest-asyncio installed)
    if exclusions:
        cmd += [arg for key in excluded_in(rel) for arg in ("--deselect", key)]
    try:
        subprocess.run(cmd, cwd=out, env=env, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        pass
    names = re.findall(r"^\s*(?:async )?def (test_\w+)", (out / rel).read_text(), re.M)
    skipped_names = {key.split("::")[-1] for key in excluded_in(rel)} if exclusions else set()
    n_defs = len([n for n in names if n not in skipped_names])
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
    parser.add_argument("--no-exclusions", action="store_true", help="count the EXCLUDED test cases too")
    parser.add_argument(
        "--only", action="append", metavar="SUBSTRING", help="run only the TEST_FILES containing this (repeatable)"
    )
    args = parser.parse_args(argv)
    selected = [rel for rel in TEST_FILES if not args.only or any(part in rel for part in args.only)]
    if not selected:
        raise SystemExit(f"--only {args.only}: no file of TEST_FILES matches")
    extract(args.mirror, args.ref, args.out)
    counts = {}
    exclusions = not args.no_exclusions
    for rel in selected:
        if exclusions and rel in EXCLUDED:
            print(f"   excluded {rel}: {EXCLUDED[rel]}", flush=True)
            continue
        c = counts[rel] = run_file(args.out, rel, args.timeout_s, exclusions)
        mark = " (import error)" if c["import_error"] else ""
        print(f"{c['passed']:4d}/{c['total']:<4d} {rel}{mark}", flush=True)
    passed, total = sum(c["passed"] for c in counts.values()), sum(c["total"] for c in counts.values())
    note = f" ({len(EXCLUDED)} EXCLUDED entries left out)" if exclusions else " (no exclusions)"
    print(f"passed {passed}/{total} = {100 * passed / max(total, 1):.1f}%{note}")
    if args.baseline_counts:
        base = json.loads(args.baseline_counts.read_text())
        base_passed = sum(min(base.get(rel, {}).get("passed", 0), counts[rel]["total"]) for rel in counts)
        print(f"baseline passed {base_passed}/{total} = {100 * base_passed / max(total, 1):.1f}% (same test cases)")
    if args.json:
        args.json.write_text(json.dumps(counts, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
