"""Defaults lists composed as Hydra does: packaged configs, the user's own files, config groups cut out of
ppo_trainer.yaml, ``_self_`` order, ``optional`` and ``override`` entries, and one-line errors for bad entries."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from verl.trainer import main_ppo
from verl.trainer.config.loader import build_config, load_config, packaged_config_text
from verl.trainer.config.validation import ConfigError

DATA = "data.train_files=/d/train.parquet"


def _write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_packaged_groups_recompose_to_the_packaged_file() -> None:
    """ppo_trainer is stored as group entries + _self_: composing it gives exactly the file (in its key order)."""
    packaged = yaml.safe_load(packaged_config_text("ppo_trainer"))
    cfg = load_config([DATA, "data.train_batch_size=256"], schema=None)
    assert list(cfg) == list(packaged)
    assert list(cfg.actor_rollout_ref) == list(packaged["actor_rollout_ref"])
    assert cfg.actor_rollout_ref.actor.clip_ratio == packaged["actor_rollout_ref"]["actor"]["clip_ratio"]
    assert cfg.reward_model.reward_manager == packaged["reward_model"]["reward_manager"]


def test_recipe_with_base_file_group_override_and_upstream_searchpath(tmp_path: Path) -> None:
    _write(tmp_path, "base.yaml", "defaults:\n  - ppo_trainer\n  - _self_\ndata:\n  train_batch_size: 16\n")
    _write(tmp_path, "actor/clip_higher.yaml", "defaults:\n  - dp_actor\n  - _self_\nclip_ratio_high: 0.28\n")
    exp = _write(
        tmp_path,
        "exp.yaml",
        "hydra:\n  searchpath:\n    - file://verl/trainer/config\n"  # upstream recipes' line: harmless here
        "defaults:\n  - base\n  - override actor@actor_rollout_ref.actor: clip_higher\n  - _self_\n"
        "data:\n  train_files: /d/train.parquet\nactor_rollout_ref:\n  actor:\n    ppo_mini_batch_size: 8\n",
    )
    built = build_config([], config_file=str(exp))
    cfg = built.cfg
    assert cfg.data.train_batch_size == 16  # from base.yaml
    assert cfg.actor_rollout_ref.actor.clip_ratio_high == 0.28  # from the group option
    assert cfg.actor_rollout_ref.actor.clip_ratio == 0.2  # dp_actor (the packaged slice) under it
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 8
    assert not built.demo_applied and cfg.algorithm.adv_estimator == "gae"
    assert {"data.train_batch_size", "actor_rollout_ref.actor.clip_ratio_high"} <= built.user_keys
    # the same choice from the command line, with --config-path/--config-name semantics (no file of that name)
    cfg = load_config([DATA, "actor@actor_rollout_ref.actor=clip_higher"], config_dir=str(tmp_path))
    assert cfg.actor_rollout_ref.actor.clip_ratio_high == 0.28


def test_self_first_lets_the_listed_configs_win(tmp_path: Path) -> None:
    after = _write(
        tmp_path,
        "after.yaml",
        f"defaults:\n  - ppo_trainer\n  - _self_\ndata:\n  seed: 7\n  {DATA[5:].replace('=', ': ')}\n",
    )
    before = _write(tmp_path, "before.yaml", "defaults:\n  - _self_\n  - ppo_trainer\ndata:\n  seed: 7\n")
    assert load_config([], config_file=str(after)).data.seed == 7
    assert load_config([DATA], config_file=str(before)).data.seed == 42  # ppo_trainer merged after the file


def test_a_yaml_without_defaults_starts_from_the_entry_points_config(tmp_path: Path) -> None:
    run = _write(tmp_path, "run.yaml", "data:\n  train_files: /d/t.parquet\n  seed: 3\n")
    cfg = load_config([], config_file=str(run))
    assert (cfg.data.seed, cfg.data.max_prompt_length) == (3, 512)


def test_optional_missing_entry_is_skipped_and_other_packaged_configs_compose(tmp_path: Path) -> None:
    exp = _write(tmp_path, "exp.yaml", "defaults:\n  - sft_trainer\n  - optional site: local\n  - _self_\n")

    def lora_rank(*overrides: str) -> int:
        return load_config(
            list(overrides), config_name="sft_trainer", config_file=str(exp), schema=None
        ).model.lora_rank

    assert lora_rank() == 0  # no site/local.yaml: skipped
    _write(tmp_path, "site/local.yaml", "# @package _global_\nmodel:\n  lora_rank: 8\n")
    assert lora_rank() == 8
    assert lora_rank("model.lora_rank=2") == 2


def test_demo_layer_sits_under_the_users_files(tmp_path: Path) -> None:
    """No data named anywhere: the demo applies, and the user's file still wins over it."""
    exp = _write(
        tmp_path, "exp.yaml", "defaults:\n  - ppo_trainer\n  - _self_\nactor_rollout_ref:\n  rollout:\n    n: 6\n"
    )
    built = build_config([], config_file=str(exp))
    assert built.demo_applied and built.cfg.algorithm.adv_estimator == "grpo"
    assert built.cfg.actor_rollout_ref.rollout.n == 6


@pytest.mark.parametrize(
    ("defaults", "expected"),
    [
        ("  - ppo_trainr\n", r"defaults entry 'ppo_trainr': no config 'ppo_trainr' .*packaged configs: .*ppo_trainer"),
        (
            "  - ppo_trainer\n  - override actor@actor_rollout_ref.actor: megatron_actor\n",
            r"defaults entry 'override actor@actor_rollout_ref.actor: megatron_actor': no option 'megatron_actor' in "
            r"group 'actor' \(available: dp_actor\); Megatron-LM is not implemented",
        ),
        (
            "  - ppo_trainer\n  - npu_profile@trainer.npu_profile: npu_profile\n",
            r"no config group 'npu_profile' \(available groups: actor, critic, data, model, ref, reward_model, "
            r"rollout\); NPU profiling",
        ),
    ],
)
def test_bad_defaults_entry_is_one_line_naming_file_and_entry(tmp_path: Path, defaults: str, expected: str) -> None:
    exp = _write(tmp_path, "exp.yaml", f"defaults:\n{defaults}  - _self_\n")
    with pytest.raises(ConfigError) as info:
        load_config([DATA], config_file=str(exp))
    (problem,) = info.value.problems
    assert problem.startswith(f"config file {exp}: ") and "\n" not in problem
    assert __import__("re").search(expected, problem), problem


def test_bad_entry_in_a_nested_user_file_names_that_file(tmp_path: Path) -> None:
    base = _write(tmp_path, "base.yaml", "defaults:\n  - ppo_trainer\n  - rollout@actor_rollout_ref.rollout: sglang\n")
    exp = _write(tmp_path, "exp.yaml", "defaults:\n  - base\n  - _self_\n")
    with pytest.raises(
        ConfigError, match=rf"config file {base}: defaults entry .*no option 'sglang' in group 'rollout'"
    ):
        load_config([DATA], config_file=str(exp))


def test_defaults_without_the_packaged_base_says_so(tmp_path: Path) -> None:
    exp = _write(tmp_path, "exp.yaml", "defaults:\n  - data@data: legacy_data\n  - _self_\n")
    with pytest.raises(ConfigError, match=r"has no actor_rollout_ref, critic.*name the packaged base \(ppo_trainer\)"):
        load_config([DATA], config_file=str(exp))


def test_a_whole_trainer_config_of_its_own_groups_is_laid_over_the_base(tmp_path: Path) -> None:
    """A copy of upstream's config directory: ppo_trainer.yaml composed from its own group files, with no entry for
    the packaged base; the sections this project adds come from the base, the file's values win."""
    _write(tmp_path, "actor/dp_actor.yaml", "ppo_mini_batch_size: 8\nppo_micro_batch_size_per_gpu: 2\n")
    main = _write(
        tmp_path,
        "ppo_trainer.yaml",
        "defaults:\n  - actor@actor_rollout_ref.actor: dp_actor\n  - _self_\n"
        "data: {train_batch_size: 16}\nactor_rollout_ref: {rollout: {n: 2}}\nalgorithm: {adv_estimator: grpo}\n"
        "trainer: {total_epochs: 3}\n",
    )
    cfg = load_config([DATA], config_file=str(main))
    assert (cfg.actor_rollout_ref.actor.ppo_mini_batch_size, cfg.data.train_batch_size, cfg.trainer.total_epochs) == (
        8,
        16,
        3,
    )
    assert "async_training" in cfg and cfg.critic.strategy == "fsdp"  # from the packaged base


def test_hydra_override_conflicts_are_one_line(tmp_path: Path) -> None:
    exp = _write(tmp_path, "exp.yaml", "defaults:\n  - ppo_trainer\n  - override nothing@here: x\n  - _self_\n")
    with pytest.raises(ConfigError) as info:
        load_config([DATA], config_file=str(exp))
    assert "nothing" in str(info.value) and len(info.value.problems) == 1


def test_cli_with_defaults_list_and_config_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path, "data/gsm8k.yaml", "defaults:\n  - legacy_data\n  - _self_\ntrain_files: /d/gsm8k.parquet\n")
    _write(tmp_path, "exp.yaml", "defaults:\n  - ppo_trainer\n  - override data@data: gsm8k\n  - _self_\n")
    assert main_ppo.main(["--config-path", str(tmp_path), "--config-name", "exp", "--cfg", "job"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["data"]["train_files"] == "/d/gsm8k.parquet" and printed["data"]["max_prompt_length"] == 512
    assert main_ppo.main(["--config", str(tmp_path / "exp.yaml"), "--cfg", "job", "data@data=nope"]) == 2
    err = capsys.readouterr().err
    assert "override 'data@data=nope': no option 'nope' in group 'data' (available: gsm8k, legacy_data)" in err


def test_the_example_recipe_composes(monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/upstream_style/recipe_defaults: a recipe directory with its own actor group option."""
    monkeypatch.setenv("HOME", "/home/user")
    root = Path(__file__).resolve().parents[3] / "examples" / "upstream_style" / "recipe_defaults" / "config"
    built = build_config([], config_file=str(root / "grpo_clip_higher.yaml"))
    actor = built.cfg.actor_rollout_ref.actor
    assert (actor.clip_ratio_high, actor.use_kl_loss, actor.ppo_mini_batch_size) == (0.28, True, 32)
    assert built.cfg.data.train_files == "/home/user/data/gsm8k/train.parquet"
    assert built.cfg.algorithm.adv_estimator == "grpo" and not built.demo_applied
    swapped = load_config(["actor@actor_rollout_ref.actor=dp_actor"], config_file=str(root / "grpo_clip_higher.yaml"))
    assert swapped.actor_rollout_ref.actor.clip_ratio_high is None
