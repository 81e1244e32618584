"""scripts/upstream_scripts.py: upstream launch scripts run with recording stubs, classified through our entry point."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("upstream_scripts", os.path.join(ROOT, "scripts", "upstream_scripts.py"))
harness = importlib.util.module_from_spec(_spec)
sys.modules["upstream_scripts"] = harness  # dataclasses look their module up while the class is made
_spec.loader.exec_module(harness)

SCRIPTS = {
    # v0.9 style: a DEVICE probe that must pick gpu, uv in front of python3, an override given twice
    "examples/grpo_trainer/run_ok.sh": """#!/usr/bin/env bash
set -xeuo pipefail
DEVICE=${DEVICE:-$(python3 -c 'import torch_npu' 2>/dev/null && echo npu || echo gpu)}
[ "$DEVICE" = gpu ] || exit 3
uv run --frozen python3 -m verl.trainer.main_ppo data.train_files=x.parquet model_engine=fsdp \\
    actor_rollout_ref.model.enable_gradient_checkpointing=False \\
    actor_rollout_ref.model.enable_gradient_checkpointing=True \\
    actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2 trainer.n_gpus_per_node=2 "$@"
""",
    "examples/grpo_trainer/run_sglang.sh": """#!/usr/bin/env bash
python3 -m verl.trainer.main_ppo data.train_files=x.parquet actor_rollout_ref.rollout.name=sglang
""",
    "examples/sft/run_sft.sh": """#!/usr/bin/env bash
[ "$#" -lt 2 ] && exit 1
torchrun --nproc_per_node=$1 -m verl.trainer.no_such_trainer trainer.default_local_dir=$2 model.partial_pretrain=m
""",
    "examples/data/prepare.sh": "#!/usr/bin/env bash\npython3 prepare.py\n",
    "examples/ppo_trainer/run_bad_key.sh": """#!/usr/bin/env bash
python3 -m verl.trainer.main_ppo data.train_files=x.parquet actor_rollout_ref.actor.no_such_key=1
""",
}


def _git_repo(tmp_path, files: dict[str, str] = SCRIPTS) -> str:
    repo = tmp_path / "upstream"
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    who = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    env = dict(os.environ, **who)
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "x"]):
        subprocess.run(cmd, cwd=repo, env=env, check=True)
    return str(repo / ".git")


def test_scripts_are_recorded_and_classified(tmp_path) -> None:
    calls, no_call = harness.measure(_git_repo(tmp_path), timeout=60)
    by_script = {c.script: c for c in calls}
    assert no_call == ["examples/data/prepare.sh"]
    ok = by_script["examples/grpo_trainer/run_ok.sh"]
    assert ok.module == "verl.trainer.main_ppo" and ok.status == "accepted" and ok.faithful, ok
    refused = by_script["examples/grpo_trainer/run_sglang.sh"]
    assert refused.status == "refused" and "SGLang is not an engine here" in refused.reason
    sft = by_script["examples/sft/run_sft.sh"]  # run again with <nproc> <save_path>
    assert sft.status == "rejected" and sft.reason.startswith("module verl.trainer.no_such_trainer")
    assert sft.reason.endswith("(upstream's own tree has no such module either: the script is stale upstream)")
    assert sft.args[0].startswith("trainer.default_local_dir=") and sft.args[0].endswith("/ckpt")
    bad = by_script["examples/ppo_trainer/run_bad_key.sh"]
    assert bad.status == "rejected" and harness.blocking_key(bad.reason) == "actor_rollout_ref.actor.no_such_key"
    table = harness.report("t", calls, no_call, depth=1, top=5, show="none")
    assert "| grpo_trainer | 1 | 1 | 1 | 0 | 2 | 0 |" in table and "| data | 0 | 0 | 0 | 0 | 0 | 1 |" in table
    assert "- 1 actor_rollout_ref.actor.no_such_key" in table


def test_upstream_has_module_reads_the_tree(tmp_path) -> None:
    with_modules = {**SCRIPTS, "verl/trainer/main_x.py": "", "verl/workers/pkg/__init__.py": ""}
    repo = _git_repo(tmp_path, with_modules)
    assert not harness.upstream_has_module(repo, "verl.trainer.no_such_trainer")
    assert harness.upstream_has_module(repo, "verl.trainer.main_x")
    assert harness.upstream_has_module(repo, "verl.workers.pkg")


def test_an_unfaithful_override_is_reported() -> None:
    from verl.trainer import main_ppo

    cfg = {"data": {"train_batch_size": 32}, "trainer": {"logger": ["console"]}}
    args = ["data.train_batch_size=16", "trainer.logger=console", "model_engine=fsdp", "hydra.run.dir=x"]
    assert harness.unfaithful_keys(main_ppo, args, cfg) == ["data.train_batch_size=16"]
    # upstream's keys with no setting here, at a value the config accepts (and drops): kept as asked
    inert = ["+actor_rollout_ref.model.lora.merge=True", "transfer_queue.enable=false", "+trainer.esi_redundant_time=9"]
    assert harness.unfaithful_keys(main_ppo, inert, cfg) == ["+trainer.esi_redundant_time=9"]


def test_translations_of_the_async_entry_points_count_as_kept() -> None:
    import importlib

    from verl.trainer.config.schema import PPOConfig
    from verl.trainer.config.script_check import schema_aliases

    one_step_off = importlib.import_module("verl.experimental.one_step_off_policy.main_ppo")
    # an entry point that wraps main_ppo: the wrapped schema's aliases (DAPO's reward_kwargs.overlong_buffer_cfg)
    assert schema_aliases(one_step_off) == PPOConfig.key_aliases
    cfg = {
        "async_training": {"mode": "fully_async"},
        "data": {"train_batch_size": 8, "gen_batch_size": None},
        "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 8}},
    }
    streaming = ["data.train_batch_size=0", "data.gen_batch_size=1"]
    assert harness.unfaithful_keys(one_step_off, streaming, cfg) == []
    cfg["data"]["train_batch_size"] = 16  # not the mini-batch the translation gives: not kept
    assert harness.unfaithful_keys(one_step_off, streaming, cfg) == streaming
    cfg["data"]["train_batch_size"], cfg["async_training"]["mode"] = 8, "one_step_off"  # fully async only
    assert harness.unfaithful_keys(one_step_off, streaming, cfg) == streaming
    # FlowRL's script: a generation batch of 3x the training batch, dynamic sampling off -> trained whole
    sync = {
        "async_training": {"mode": None},
        "algorithm": {"filter_groups": {"enable": False}},
        "data": {"train_batch_size": 24, "gen_batch_size": 24},
    }
    unfiltered = ["data.train_batch_size=8", "data.gen_batch_size=24"]
    assert harness.unfaithful_keys(one_step_off, unfiltered, sync) == []
    sync["algorithm"]["filter_groups"]["enable"] = True  # filtering keeps the training batch: 24 is not what was set
    assert harness.unfaithful_keys(one_step_off, unfiltered, sync) == unfiltered[:1]


def test_blocking_key_of_error_lines() -> None:
    assert harness.blocking_key("a.b.c: unknown key; did you mean a.b.d?") == "a.b.c"
    assert harness.blocking_key("override '+x.y={a:b}': cannot parse") == "x.y"
    assert harness.blocking_key("config file /t/config/ppo_megatron_trainer.yaml: not found") == (
        "--config-name ppo_megatron_trainer"
    )
    assert harness.blocking_key("module verl.trainer.sft_trainer: ModuleNotFoundError: x") == (
        "module verl.trainer.sft_trainer"
    )


def test_a_blank_override_is_stale_upstream_as_hydra_refuses_it_too() -> None:
    # `key=v \  # comment` in a shell script passes a lone space: Hydra's parser refuses it as our parser does
    assert harness.hydra_refuses_override("override ' ': expected key=value (e.g. data.train_batch_size=32)")
    assert not harness.hydra_refuses_override("override 'a.b=1': expected key=value")
    assert not harness.hydra_refuses_override("a.b: unknown key")


RECIPE_REPO = {
    # verl-recipe's layout: a recipe per top-level folder, its Hydra config under config/, run from verl's root
    "dapo/config/dapo_trainer.yaml": (
        "hydra:\n  searchpath:\n    - file://verl/trainer/config\ndefaults:\n  - ppo_trainer\n  - _self_\n"
        "data:\n  gen_batch_size: ${data.train_batch_size}\nalgorithm:\n  filter_groups:\n"
        "    _target_: verl.trainer.config.FilterGroupsConfig\n    enable: False\n    metric: null\n"
    ),
    "dapo/run_dapo.sh": """#!/usr/bin/env bash
python3 -m recipe.dapo.main_dapo data.train_files=x.parquet data.train_batch_size=4 data.gen_batch_size=12 \\
    algorithm.filter_groups.enable=True algorithm.filter_groups.metric=acc reward_model.reward_manager=dapo
""",
    "gvpo/config/gvpo_trainer.yaml": (
        "hydra:\n  searchpath:\n    - file://verl/trainer/config\ndefaults:\n  - ppo_trainer\n  - _self_\n"
        "actor_rollout_ref:\n  actor:\n    _target_: recipe.gvpo.gvpo_actor_config.FSDPActorConfig\n"
        "    gvpo_beta: 0.1\n"
    ),
    "gvpo/run_gvpo.sh": """#!/usr/bin/env bash
python3 -m recipe.gvpo.gvpo_main_ppo data.train_files=x.parquet actor_rollout_ref.actor.policy_loss.loss_mode="gvpo" \\
    actor_rollout_ref.actor.gvpo_beta=0.2 actor_rollout_ref.rollout.n=4 \\
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 algorithm.norm_adv_by_std_in_grpo=False
""",
    "sppo/config/sppo_trainer.yaml": (
        "hydra:\n  searchpath:\n    - file://verl/trainer/config\ndefaults:\n  - ppo_trainer\n  - _self_\n"
        "actor_rollout_ref:\n  actor:\n    _target_: recipe.sppo.config.SPPOActorConfig\n    sppo_eta: 1.0\n"
        "algorithm:\n  adv_estimator: null\n  sppo_eta: 1.0\n"
    ),
    "sppo/run_sppo.sh": "#!/usr/bin/env bash\npython3 -m recipe.sppo.main_sppo data.train_files=x.parquet "
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4\n",
    "prime/run_prime.sh": "#!/usr/bin/env bash\npython3 -m recipe.prime.main_prime data.train_files=x.parquet\n",
    "install_verl.sh": "#!/usr/bin/env bash\npip install verl\n",
}


def test_a_verl_recipe_tree_runs_its_dapo_main_as_main_ppo_and_refuses_own_trainers(tmp_path) -> None:
    repo = _git_repo(tmp_path, RECIPE_REPO)
    assert harness.is_recipe_repo(repo)
    calls, no_call = harness.measure(repo, timeout=60, tree=str(tmp_path / "tree"))
    by_script = {c.script: c for c in calls}
    assert no_call == [] and set(by_script) == {
        "recipe/dapo/run_dapo.sh",
        "recipe/gvpo/run_gvpo.sh",
        "recipe/sppo/run_sppo.sh",
        "recipe/prime/run_prime.sh",
    }
    dapo = by_script["recipe/dapo/run_dapo.sh"]
    assert dapo.module == "verl.trainer.main_ppo" and dapo.status == "accepted" and dapo.faithful, dapo
    assert dapo.args[:2] == [f"--config-path={tmp_path}/tree/recipe/dapo/config", "--config-name=dapo_trainer"]
    gvpo = by_script["recipe/gvpo/run_gvpo.sh"]  # the recipe's actor class (gvpo_beta) is this schema's actor
    assert gvpo.module == "verl.trainer.main_ppo" and gvpo.status == "accepted" and gvpo.faithful, gvpo
    sppo = by_script["recipe/sppo/run_sppo.sh"]  # what SPPO's trainer always does comes first
    assert sppo.status == "accepted" and sppo.faithful, sppo
    assert sppo.args[2:4] == ["algorithm.adv_estimator=sppo", "actor_rollout_ref.actor.policy_loss.loss_mode=sppo"]
    prime = by_script["recipe/prime/run_prime.sh"]
    assert prime.status == "refused" and "recipe's own program" in prime.reason


def test_a_recipe_call_keeps_the_scripts_config_name_and_path(tmp_path) -> None:
    module, args = harness.recipe_main_call(
        "recipe.dapo.main_dapo", ["--config-path", "recipe/qat/config", "--config-name", "dapo_qat", "a.b=1"], "/t"
    )
    assert module == "verl.trainer.main_ppo"
    assert args == ["--config-path=/t/recipe/qat/config", "--config-name", "dapo_qat", "a.b=1"]


def test_the_partial_rollout_recipe_runs_main_ppo_on_the_packaged_config() -> None:
    # the recipe's main uses upstream's own ppo_trainer config: no config path of the recipe's, and the setting its
    # trainer always applies first (the script's `+` of the same key, a key upstream lacks, is then a set)
    module, args = harness.recipe_main_call(
        "recipe.partial_rollout.main_ppo", ["+async_training.partial_rollout=True", "a.b=1"], "/t"
    )
    assert module == "verl.trainer.main_ppo"
    assert args == ["async_training.partial_rollout=true", "+async_training.partial_rollout=True", "a.b=1"]
