"""scripts/rewrite_moved_imports.py: verl's verl.utils.* paths of the moved packages rewritten to the rooms, and what
it leaves alone (citations of verl's paths, upstream-only modules, documented aliases)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("rewrite_moved_imports", ROOT / "scripts" / "rewrite_moved_imports.py")
rewrite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rewrite)


def _py(text: str) -> str:
    problems: list[str] = []
    out = rewrite.rewrite_text(text, True, problems)
    assert not problems, problems
    return out


def test_imports_strings_and_attributes_follow_the_move() -> None:
    assert _py("from verl.utils.reward_score import gsm8k\n") == "from verl.rewards import gsm8k\n"
    assert _py("import verl.utils.tracking.report.compare\n") == "import verl.reporting.report.compare\n"
    assert _py('monkeypatch.setattr("verl.utils.models.hub.resolve_hub_model", f)\n') == (
        'monkeypatch.setattr("verl.models.hub.resolve_hub_model", f)\n'
    )
    assert _py("x = verl.utils.tracking.Tracking\n") == "x = verl.reporting.Tracking\n"
    assert _py("from verl.utils.dataset.arithmetic import DATA_SOURCE\n") == (
        "from verl.data.arithmetic_task import DATA_SOURCE\n"
    )


def test_from_verl_utils_import_is_split() -> None:
    assert _py("from verl.utils import flops_counter, fsdp_utils  # note\n") == (
        "from verl.hardware import flops_counter  # note\nfrom verl.utils import fsdp_utils\n"
    )
    assert _py("    from verl.utils import tracking\n") == "    from verl import reporting as tracking\n"
    assert _py("from verl.utils import metric as m\n") == "from verl.reporting import metric as m\n"
    assert _py("from verl.utils import fs, hf_tokenizer\n") == "from verl.utils import fs, hf_tokenizer\n"


def test_paths_of_files_and_tests() -> None:
    text = "see verl/utils/tracking/plotting.py and tests/utils/checkpoint/test_layout.py; verl/utils/flops_counter.py."
    assert rewrite.rewrite_text(text, False, []) == (
        "see verl/reporting/plotting.py and tests/checkpoint/test_layout.py; verl/hardware/flops_counter.py."
    )


def test_what_stays() -> None:
    kept = [
        "Upstream: ``verl/utils/dataset/vision_utils.py`` (``process_image``)\n",  # a citation of verl's path
        "verl's ``verl.utils.metric`` is this package\n",
        "(verl/utils/dataset/multiturn_sft_dataset.py, NO_PADDING branch)\n",  # upstream-only module
        "x = verl.utils.dataset.multiturn_sft_dataset\n",
        "from verl.utils.evaluation import Evaluator\n",  # the documents' path (an alias)
        "from verl.utils.fs import atomic_write_text\n",  # not moved
        "import verl.utils.metrics_helper\n",  # a prefix must end at a dot
    ]
    for line in kept:
        assert _py(line) == line, line


def test_skipped_files_are_those_about_the_old_paths() -> None:
    files = {p.relative_to(ROOT).as_posix() for p in rewrite._files(["verl", "tests", "docs"])}
    assert "verl/utils/_moved.py" not in files and "tests/test_porting_map.py" not in files
    assert "tests/scripts/test_rewrite_moved_imports.py" not in files  # this file: its inputs are old paths
    assert "verl/trainer/ppo/ray_trainer.py" in files
