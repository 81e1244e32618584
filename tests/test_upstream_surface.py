"""Upstream verl v0.9's module paths and semantics for the extension points recipes use: registries rebound by
the caller, Metric aggregation, BaseCheckpointManager retention, AlgoConfig, rollout_corr_helper, hdfs_io, small
utils, and the one-line ImportError of upstream modules for features this project does not have."""

from __future__ import annotations

import importlib
import subprocess
import sys
from enum import Enum
from pathlib import Path

import pytest
import torch

import verl.trainer.ppo.core_algos as core_algos
from verl.absent_modules import ABSENT_MODULES, absent_reason


# ------------------------------------------------------------------------------------------- registries
def test_registry_functions_follow_a_rebound_registry_dict(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream's tests replace ``core_algos.ADV_ESTIMATOR_REGISTRY`` with a new dict: registration and lookup
    (and so the driver, which looks up through get_adv_estimator_fn) must use the dict bound now."""
    original = core_algos.ADV_ESTIMATOR_REGISTRY
    fresh = {"gae": lambda x: x * 2}
    monkeypatch.setattr(core_algos, "ADV_ESTIMATOR_REGISTRY", fresh)

    class MyEstimators(Enum):
        HALF = "half_of_it"

    @core_algos.register_adv_est(MyEstimators.HALF)
    def half(x):
        return x / 2

    assert fresh["half_of_it"] is half and "half_of_it" not in original
    assert core_algos.get_adv_estimator_fn("gae")(5) == 10
    assert core_algos.get_adv_estimator_fn(MyEstimators.HALF) is half
    with pytest.raises(ValueError, match="Unknown advantage estimator simply: grpo"):
        core_algos.get_adv_estimator_fn("grpo")  # the built-ins live in the old dict
    with pytest.raises(ValueError, match="Adv estimator half_of_it has already been registered"):
        core_algos.register_adv_est("half_of_it")(lambda x: x)

    losses = {}
    monkeypatch.setattr(core_algos, "POLICY_LOSS_REGISTRY", losses)
    fn = core_algos.register_policy_loss("mine")(lambda *a, **k: (torch.tensor(0.0), {}))
    assert losses == {"mine": fn} and core_algos.get_policy_loss_fn("mine") is fn
    with pytest.raises(ValueError, match=r"Unsupported loss mode: vanilla. Supported modes are: \['mine'\]"):
        core_algos.get_policy_loss_fn("vanilla")


def test_registry_is_back_after_the_rebinding_is_undone() -> None:
    assert core_algos.get_adv_estimator_fn("grpo") is core_algos.compute_grpo_outcome_advantage


# ------------------------------------------------------------------------------------------------ metrics
def test_metric_aggregations_and_reduce_metrics() -> None:
    from verl.utils.metric import AggregationType, Metric, reduce_metrics

    m = Metric("sum", [1.0, torch.tensor(2.0)])
    m.append(3)
    assert m.aggregate() == 6.0 and m.aggregation is AggregationType.SUM
    assert Metric(AggregationType.MAX, [1, 5, 2]).aggregate() == 5.0
    ranks = [Metric("sum", [1.0, 3.0]), Metric("sum", [3.0, 5.0])]  # two ranks, two micro-batches each
    assert Metric.aggregate_dp(ranks) == pytest.approx((1 + 3) / 2 + (3 + 5) / 2)
    assert Metric.aggregate_dp([Metric("min", [4, 2]), Metric("min", [3, 1])]) == 1.0
    with pytest.raises(ValueError, match="same number of values"):
        Metric.aggregate_dp([Metric("mean", [1.0]), Metric("mean", [1.0, 2.0])])
    with pytest.raises(ValueError, match="Unsupported aggregation type: 'median'"):
        Metric("median")
    with pytest.raises(ValueError, match="scalar tensor"):
        Metric("mean", torch.ones(2))
    with pytest.raises(ValueError, match="Aggregation type mismatch"):
        Metric("mean").extend(Metric("sum", [1.0]))
    # a name saying "max" does not override a Metric's own aggregation; a list of Metrics is one per DP rank
    out = reduce_metrics(
        {"max_loss": Metric("mean", [1.0, 3.0]), "vf_loss": [Metric("sum", [1.0]), Metric("sum", [3.0])], "x": [1, 3]}
    )
    assert out == {"max_loss": 2.0, "vf_loss": 2.0, "x": 2.0}
    assert {k: v.values for k, v in Metric.from_dict({"a": 1.0}, "max").items()} == {"a": [1.0]}


# ------------------------------------------------------------------------------------------- checkpoints
def _step_dir(root: Path, step: int) -> str:
    path = root / f"global_step_{step}"
    path.mkdir()
    (path / "w.txt").write_text(str(step))
    return str(path)


def test_base_checkpoint_manager_retention(tmp_path: Path) -> None:
    from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager

    mgr = BaseCheckpointManager(model=object(), optimizer=None, checkpoint_config={"save_contents": ["model"]})
    assert mgr.should_save_model and not mgr.should_save_optimizer and mgr.should_load_optimizer
    assert (mgr.rank, mgr.world_size) == (0, 1)
    first = _step_dir(tmp_path, 1)
    mgr.ensure_checkpoint_capacity(1)  # the last good checkpoint survives until the next one is saved
    mgr.register_checkpoint(first, 1)
    mgr.ensure_checkpoint_capacity(1)
    assert Path(first).exists()
    second = _step_dir(tmp_path, 2)
    mgr.register_checkpoint(second, 1)
    assert not Path(first).exists() and mgr.previous_saved_paths == [second]
    third = _step_dir(tmp_path, 3)
    mgr.register_checkpoint(third, 3)
    mgr.ensure_checkpoint_capacity(2)  # before a save with 2 kept: keep 1
    assert mgr.previous_saved_paths == [third] and not Path(second).exists()
    mgr.register_checkpoint(_step_dir(tmp_path, 4), 0)  # 0: keep everything
    assert len(mgr.previous_saved_paths) == 2
    assert mgr.checkpath(None, "hdfs://x") == (False, "hdfs://x")
    with pytest.raises(ValueError, match="cannot be both None"):
        mgr.checkpath(None, None)
    with pytest.raises(NotImplementedError, match="BaseCheckpointManager must implement save_checkpoint"):
        mgr.save_checkpoint(str(tmp_path))
    assert BaseCheckpointManager.is_lora_only_state_dict({"a.lora_A.weight": 1}) is True
    assert BaseCheckpointManager.is_lora_only_state_dict({}) is False


# ------------------------------------------------------------------------------------------ config, rollout
def test_algo_config_is_the_algorithm_section() -> None:
    from verl.trainer.config import AlgoConfig
    from verl.trainer.config.algorithm import AlgoConfig as same
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.trainer.config.schema import AlgorithmConfig

    assert AlgoConfig is same is AlgorithmConfig
    cfg = AlgoConfig(adv_estimator="grpo")
    assert cfg["adv_estimator"] == "grpo" and isinstance(cfg.rollout_correction, RolloutCorrectionConfig)


def test_rollout_corr_helper_returns_upstreams_shapes() -> None:
    from verl.trainer.ppo.rollout_corr_helper import (
        compute_offpolicy_metrics,
        compute_rollout_correction_and_rejection_mask,
    )

    old = torch.tensor([[0.0, -1.0, -2.0], [-0.5, -0.5, 0.0]])
    rollout = torch.tensor([[-1.0, -1.0, -1.0], [-0.5, -0.4, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    weights, new_mask, metrics = compute_rollout_correction_and_rejection_mask(
        old, rollout, mask, rollout_is="token", rollout_is_threshold=2.0
    )
    w = weights.batch["rollout_is_weights"]
    expected = torch.exp(old - rollout).clamp(max=2.0) * mask  # token TIS: min(exp(r_t), 2) on valid tokens
    assert torch.allclose(w.float(), expected) and torch.equal(new_mask, mask)
    assert metrics["rollout_corr/kl"] == pytest.approx(compute_offpolicy_metrics(old, rollout, mask)["kl"])
    assert compute_offpolicy_metrics(old, rollout, mask)["kl"] == pytest.approx((rollout - old)[mask.bool()].mean())
    none, same_mask, _ = compute_rollout_correction_and_rejection_mask(old, rollout, mask)
    assert none is None and torch.equal(same_mask, mask)


# --------------------------------------------------------------------------------------------- small utils
def test_hdfs_io_on_local_paths(tmp_path: Path) -> None:
    from verl.utils import hdfs_io

    src = tmp_path / "data"
    src.mkdir()
    (src / "train.parquet").write_text("rows")
    dst = tmp_path / "out" / "data"
    hdfs_io.makedirs(str(dst.parent))
    with pytest.raises(FileExistsError):
        hdfs_io.makedirs(str(dst.parent))
    assert hdfs_io.copy(src=str(src), dst=str(dst)) is True
    assert (dst / "train.parquet").read_text() == "rows" and hdfs_io.exists(str(dst))
    (src / "train.parquet").write_text("new")
    hdfs_io.copy(str(src), str(dst))  # re-running a preprocessing script merges into the existing copy
    assert (dst / "train.parquet").read_text() == "new"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        hdfs_io.copy(str(tmp_path / "missing"), str(dst))


def test_small_upstream_names(tmp_path: Path) -> None:
    from verl.utils import omega_conf_to_dataclass
    from verl.utils.config import omega_conf_to_dataclass as same
    from verl.utils.device import get_nccl_backend
    from verl.utils.import_utils import load_extern_object

    assert omega_conf_to_dataclass is same
    assert get_nccl_backend() == ("nccl" if torch.cuda.is_available() else "gloo")
    mod = tmp_path / "my_reward.py"
    mod.write_text("def score(x):\n    return x + 1\n")
    assert load_extern_object(str(mod), "score")(1) == 2
    with pytest.raises(AttributeError, match="'nope' not found"):
        load_extern_object(str(mod), "nope")
    with pytest.raises(AttributeError, match="no module path given"):
        load_extern_object(None, "score")


# ------------------------------------------------------------------------------------------ absent modules
@pytest.mark.parametrize("name", sorted(ABSENT_MODULES))
def test_absent_upstream_modules_fail_with_one_line(name: str) -> None:
    for target in (name, name + ".sub"):  # a module below it fails on its package, with the same line
        with pytest.raises(ModuleNotFoundError) as info:
            importlib.import_module(target)
        message = str(info.value)
        assert message.startswith(f"{name} is not provided by this verl: ") and "\n" not in message


def test_the_finder_never_shadows_a_module_that_exists() -> None:
    assert absent_reason("verl.workers.fsdp_workers") is None
    assert absent_reason("verl.utils.megatron_utilsx") is None  # a prefix must end at a dot
    for name in ABSENT_MODULES:  # no listed path exists in the package
        parts = name.split(".")
        path = Path(__file__).resolve().parents[1].joinpath(*parts)
        assert not path.exists() and not path.with_suffix(".py").exists(), name
    out = subprocess.run(
        [sys.executable, "-c", "import verl.workers.megatron_workers"], capture_output=True, text=True, check=False
    )
    assert "Megatron-LM is not supported here" in out.stderr.splitlines()[-1]
