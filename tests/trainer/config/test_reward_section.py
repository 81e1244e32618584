"""Upstream verl v0.9's ``reward:`` section: the home of reward config, the legacy keys still read (one deprecation
line), the same setting given differently in both places an error naming both keys."""

from __future__ import annotations

import warnings

import pytest

from verl.trainer.config import ConfigError, ConfigWarning, load_config
from verl.trainer.ppo.reward import get_custom_reward_fn, load_reward_manager


def _load(overrides: list[str]) -> tuple[object, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        cfg = load_config(overrides)
    lines = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning) and "deprecated" in str(w.message)]
    return cfg, lines


def test_the_reward_section_sets_what_the_trainer_reads_without_a_deprecation() -> None:
    cfg, lines = _load(
        ["reward.reward_manager.name=dapo", "reward.num_workers=2", "reward.sandbox_fusion.url=http://h:1/run"]
    )
    assert lines == []
    assert cfg.reward_model.reward_manager == "dapo"
    assert cfg.reward_model.num_workers == 2
    assert cfg.reward_model.sandbox_fusion.url == "http://h:1/run"


def test_legacy_keys_are_read_with_one_deprecation_line() -> None:
    cfg, lines = _load(["reward_model.reward_manager=batch", "custom_reward_function.name=my_score"])
    assert len(lines) == 1
    assert "reward_model.reward_manager" in lines[0] and "custom_reward_function.name" in lines[0]
    # the reward section shows what the legacy keys set
    assert cfg.reward.reward_manager.name == "batch" and cfg.reward.custom_reward_function.name == "my_score"
    # a key inside a legacy mapping counts too
    cfg, lines = _load(["+custom_reward_function.reward_kwargs.scale=2"])
    assert len(lines) == 1 and "custom_reward_function.reward_kwargs" in lines[0]
    assert cfg.reward.custom_reward_function.reward_kwargs.scale == 2
    # the same value in both places is fine (still one line)
    _, lines = _load(["reward_model.reward_manager=batch", "reward.reward_manager.name=batch"])
    assert len(lines) == 1


def test_both_places_with_different_values_is_an_error_naming_both() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(["reward.reward_model.model_path=/a", "reward_model.model.path=/b"])
    (line,) = err.value.problems
    assert "reward.reward_model.model_path=/a" in line and "reward_model.model.path=/b" in line


def test_custom_reward_function_from_the_reward_section_scores(tmp_path) -> None:
    (tmp_path / "score.py").write_text(
        "def half(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.5\n"
    )
    cfg, _ = _load(
        [f"reward.custom_reward_function.path={tmp_path / 'score.py'}", "reward.custom_reward_function.name=half"]
    )
    fn = get_custom_reward_fn(cfg)
    assert fn("src", "x", "y") == 0.5


def test_importlib_reward_manager_and_the_reward_pool(tmp_path, byte_tokenizer) -> None:
    (tmp_path / "mgr.py").write_text(
        "from verl.workers.reward_manager.naive import NaiveRewardManager\n"
        "class MyManager(NaiveRewardManager):\n    pass\n"
    )
    cfg, _ = _load(
        [
            "reward.reward_manager.source=importlib",
            f"reward.reward_manager.module.path={tmp_path / 'mgr.py'}",
            "reward.reward_manager.module.name=MyManager",
            "reward.reward_model.enable_resource_pool=true",
            "reward.reward_model.nnodes=1",
            "reward.reward_model.n_gpus_per_node=1",
        ]
    )
    manager = load_reward_manager(cfg, byte_tokenizer, num_examine=0)
    assert type(manager).__name__ == "MyManager"
    assert list(cfg.trainer.resource_pool_spec.reward_pool) == [1]
    assert cfg.trainer.resource_pool_mapping.rm == "reward_pool"
    with pytest.raises(
        ConfigError, match="tensor_model_parallel_size x data_parallel_size = 2 must be >= 1 and divide"
    ):
        load_config(["reward.reward_model.enable=true", "+reward.reward_model.rollout.tensor_model_parallel_size=2"])
    # not served: upstream's layout defaults (TP 2) stand for nothing
    load_config(["+reward.reward_model.rollout.tensor_model_parallel_size=2"])
    with pytest.raises(ConfigError, match="source=importlib needs"):
        load_config(["reward.reward_manager.source=importlib"])


RM_ROLLOUT = "+reward.reward_model.rollout"


def test_reward_model_rollout_maps_onto_the_rm_workers() -> None:
    """upstream v0.9's Skywork RM script: vllm, tp 1, 8192 + 4096 tokens, 0.8 of the GPU (on a pool of its own)."""
    pool = ["reward.reward_model.enable_resource_pool=true", "reward.reward_model.nnodes=1",
            "reward.reward_model.n_gpus_per_node=1"]  # fmt: skip
    cfg = load_config(
        [
            *pool,
            f"{RM_ROLLOUT}.name=vllm",
            f"{RM_ROLLOUT}.tensor_model_parallel_size=1",
            f"{RM_ROLLOUT}.prompt_length=8192",
            f"{RM_ROLLOUT}.response_length=4096",
            f"{RM_ROLLOUT}.gpu_memory_utilization=0.8",
            f"{RM_ROLLOUT}.dtype=bf16",
        ]
    )
    rm = cfg.reward_model
    assert (rm.max_length, rm.gpu_memory_utilization, rm.dtype) == (12288, 0.8, "bfloat16")
    assert load_config([f"{RM_ROLLOUT}.prompt_length=100", "reward_model.max_length=64"]).reward_model.max_length == 64


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ([f"{RM_ROLLOUT}.name=mystery"], "mystery is not an engine here"),
        ([f"{RM_ROLLOUT}.gpu_memory_utilization=2"], "in (0, 1]"),
        ([f"{RM_ROLLOUT}.enforce_eager=false"], "rollout.enforce_eager=False: upstream's reward-model server setting"),
        ([f"{RM_ROLLOUT}.speculative=1"], "rollout.speculative: upstream's reward-model server setting"),
        (
            ["reward.reward_model.enable=true", f"{RM_ROLLOUT}.expert_parallel_size=2"],
            "must divide a replica's 1 ranks",
        ),
    ],
)
def test_reward_model_rollout_refusals_are_one_line(extra: list[str], needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(extra)
    assert len(err.value.problems) == 1 and needle in err.value.problems[0], err.value.problems


def test_january_reward_loop_keys_are_the_reward_sections() -> None:
    """verl's January scripts: ``reward_model.use_reward_loop=True`` + ``reward_model.rollout.*`` (+ the pool keys)
    configure the reward model as ``reward.reward_model.*`` does; refusals name the key the script wrote;
    ``use_reward_loop=False`` leaves ``rollout`` unread, with a warning."""
    legacy_pool = ["reward_model.enable_resource_pool=true", "reward_model.nnodes=1", "reward_model.n_gpus_per_node=1"]
    rm = "+reward_model.rollout"
    rollout = [f"{rm}.name=vllm", f"{rm}.prompt_length=2048", f"{rm}.response_length=1024",
               f"{rm}.gpu_memory_utilization=0.8"]  # fmt: skip
    cfg, _ = _load(["reward_model.use_reward_loop=true", *legacy_pool, *rollout])
    assert (cfg.reward_model.max_length, cfg.reward_model.gpu_memory_utilization) == (3072, 0.8)
    assert cfg.reward.reward_model.rollout.name == "vllm" and cfg.reward.reward_model.enable_resource_pool
    assert cfg.trainer.resource_pool_mapping.rm == "reward_pool"
    # colocated: the share bounds the reward model's own footprint in the actor's process (reward_model_budget.py)
    cfg = load_config(rollout)
    assert cfg.reward_model.gpu_memory_utilization == 0.8 and not cfg.reward_model.enable_resource_pool
    assert load_config([f"{RM_ROLLOUT}.gpu_memory_utilization=0.5"]).reward_model.gpu_memory_utilization == 0.5
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        cfg = load_config(["reward_model.use_reward_loop=false", *rollout])
    assert cfg.reward_model.max_length is None and not cfg.reward.reward_model.rollout
    assert any("use_reward_loop=false" in str(w.message) for w in caught)
    with pytest.raises(ConfigError, match="set the same thing; keep reward.reward_model.rollout"):
        load_config(["+reward_model.rollout.name=vllm", "+reward.reward_model.rollout.name=hf"])


def test_a_null_function_name_is_the_default_name(tmp_path) -> None:
    """Upstream's e2e script passes ``reward.custom_reward_function.path=null name=null`` when it tests no custom
    function; with a path, the null name loads ``compute_score``."""
    for overrides in (
        ["reward.custom_reward_function.path=null", "reward.custom_reward_function.name=null"],
        ["custom_reward_function.path=null", "custom_reward_function.name=null"],
    ):
        cfg, _ = _load(overrides)
        assert cfg.reward.custom_reward_function.name == cfg.custom_reward_function.name == "compute_score"
        assert get_custom_reward_fn(cfg) is None
    scorer = tmp_path / "score.py"
    scorer.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.5\n")
    cfg, _ = _load([f"reward.custom_reward_function.path={scorer}", "reward.custom_reward_function.name=null"])
    assert get_custom_reward_fn(cfg)("gsm8k", "x", "y") == 0.5
