"""scripts/upstream_ci_calls.py: the launch lines of upstream's CI workflows run with their environments under the
recording stubs, and the calls classified through our entry points."""

from __future__ import annotations

import importlib.util
import os
import sys

from tests.scripts.test_upstream_scripts import _git_repo

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
_spec = importlib.util.spec_from_file_location(
    "upstream_ci_calls", os.path.join(ROOT, "scripts", "upstream_ci_calls.py")
)
ci = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ci)

E2E = """#!/usr/bin/env bash
set -xeuo pipefail
ADV=${ADV_ESTIMATOR:-gae}
NAME=${reward_fn_name:-null}
device_name=$(python3 - <<'EOF'
from verl.utils.device import get_device_name
print(get_device_name())
EOF
)
[ "$device_name" = cuda ] || exit 3
python3 -m verl.trainer.main_ppo algorithm.adv_estimator=$ADV reward.custom_reward_function.name=$NAME \\
    trainer.experiment_name=$EXP
rm -f "$KEEP_ME"
"""


def _workflow(doomed: str) -> str:
    return f"""
name: e2e
jobs:
  fsdp:
    runs-on: ["${{{{ needs.setup.outputs.runner-label || 'L20x8' }}}}"]
    env:
      UV_RUN: "uv run --frozen --extra vllm"
      EXP: from-the-job
      KEEP_ME: {doomed}
    steps:
      - uses: actions/checkout@v4
      - name: GRPO
        run: |
          $UV_RUN ray stop --force
          rm -f {doomed}
          ADV_ESTIMATOR=grpo \\
            bash tests/special_e2e/run.sh
      - name: merge test
        run: |
          export exp=x
          $UV_RUN python3 -m verl.model_merger test --backend fsdp --local_dir ckpt/${{{{ env.EXP }}}}/actor \\
            --test_hf_dir ckpt/$exp/hf
      - name: nothing to launch
        run: pip install -e .
"""


def test_workflow_launch_lines_run_with_their_environment(tmp_path) -> None:
    doomed = tmp_path / "must_survive"
    doomed.write_text("x")
    files = {"tests/special_e2e/run.sh": E2E, ".github/workflows/e2e.yml": _workflow(str(doomed))}
    calls, no_call, made = ci.measure(_git_repo(tmp_path, files), timeout=60)
    assert doomed.exists()  # only launch lines (and exports) run, and the scripts' rm records instead
    assert no_call == [] and made == 2
    by_step = {c.script: c for c in calls}
    grpo = by_step["e2e.yml/fsdp: GRPO"]
    assert grpo.module == "verl.trainer.main_ppo" and grpo.status == "accepted" and grpo.faithful, grpo
    assert "algorithm.adv_estimator=grpo" in grpo.args and "trainer.experiment_name=from-the-job" in grpo.args
    merge = by_step["e2e.yml/fsdp: merge test"]
    assert merge.module == "verl.model_merger" and merge.status == "accepted"
    assert merge.args[:2] == ["test", "--backend"] and "ckpt/from-the-job/actor" in merge.args


def test_logical_lines_and_expressions() -> None:
    block = "# comment\nA=1 \\\n  B=2 bash x.sh\n\necho ${{ env.HOME_DIR }}/y ${{ secrets.T }}\n"
    assert ci.logical_lines(ci.github_expressions(block)) == ["A=1    B=2 bash x.sh", "echo ${HOME_DIR}/y"]
    assert ci.launch_lines("rm -rf /x\nexport K=v\npython3 -m verl.trainer.main_ppo a=1\n") == [
        "export K=v",
        "python3 -m verl.trainer.main_ppo a=1",
    ]
    assert ci.launch_lines("export K=v\npip install -e .\n") == []
