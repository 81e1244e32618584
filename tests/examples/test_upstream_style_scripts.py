"""Launch scripts written in upstream verl's style (examples/upstream_style/) are accepted and resolve to what they
ask for.

For every script: its exact overrides are captured (the script runs with ``PYTHON`` set to a stub that prints its
arguments), the config is built from them, and every ``key=value`` must be found at its key (``+`` keys included,
``critic.model.fsdp_config.*`` at its canonical ``critic.fsdp_config.*``). The script is also run for real through
``python -m verl.trainer.main_ppo --cfg job``, whose YAML must equal that config. Finally each script's settings are
checked where they take effect (backend choice, reward manager, scheduler, vLLM engine arguments).
"""

from __future__ import annotations

import glob
import json
import os
import stat
import subprocess
import sys

import pytest
import yaml
from omegaconf import OmegaConf

from verl.trainer.config import load_config
from verl.trainer.config.loader import parse_override, rename_aliased_key
from verl.trainer.config.parallel_checks import resolve_backend, world_size
from verl.trainer.config.schema import PPOConfig
from verl.trainer.config.script_check import override_found, value_at

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT_DIR = os.path.join(ROOT, "examples", "upstream_style")
SCRIPTS = sorted(glob.glob(os.path.join(SCRIPT_DIR, "*.sh")))
ALGORITHMS = {
    "run_qwen2_5_0_5b_grpo.sh": "grpo",
    "run_qwen2_5_0_5b_ppo.sh": "gae",
    "run_qwen2_5_0_5b_ppo_seq_balance.sh": "gae",
    "run_qwen2_5_0_5b_rloo.sh": "rloo",
    "run_qwen2_5_0_5b_reinforce_plus_plus.sh": "reinforce_plus_plus",
    "run_qwen2_5_0_5b_remax.sh": "remax",
    "run_dapo_qwen2_5_0_5b.sh": "grpo",
    "run_qwen2_5_0_5b_grpo_lora.sh": "grpo",
    "run_qwen2_5_7b_grpo_multinode_hsdp.sh": "grpo",
    "run_qwen2_5_0_5b_dr_grpo.sh": "grpo",
    "run_qwen2_5_0_5b_grpo_cosine.sh": "grpo",
    "run_qwen2_5_0_5b_ppo_adaptive_kl.sh": "gae",
    "run_qwen2_5_0_5b_grpo_v09_engine_keys.sh": "grpo",
}


@pytest.fixture(scope="module")
def argv_stub(tmp_path_factory) -> str:
    """An executable standing in for ``python``: prints its arguments as JSON."""
    path = tmp_path_factory.mktemp("stub") / "python"
    path.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import json, sys; print(json.dumps(sys.argv[1:]))' \"$@\"\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.fixture(scope="module")
def cfg_job_runs(request: pytest.FixtureRequest, run_ahead):
    """Each selected script's real command line with ``--cfg job`` (a fresh interpreter each: the slow part here),
    started ahead, two at a time."""
    env = dict(os.environ, PYTHON=sys.executable, HOME="/home/user", PYTHONPATH=ROOT)
    commands = {
        script: dict(args=["bash", script, "--cfg", "job"], env=env, cwd=ROOT, timeout=120)
        for script in run_ahead.selected(request, "script")
    }
    runs = run_ahead.start(commands)
    yield runs
    runs.close()


def _overrides(script: str, stub: str) -> list[str]:
    env = dict(os.environ, PYTHON=stub, HOME="/home/user")
    out = subprocess.run(["bash", script], env=env, capture_output=True, text=True, check=True, timeout=60).stdout
    argv = json.loads(out.strip().splitlines()[-1])
    assert argv[:2] == ["-m", "verl.trainer.main_ppo"], argv[:2]
    return argv[2:]


def test_every_algorithm_kind_has_a_script() -> None:
    assert sorted(os.path.basename(s) for s in SCRIPTS) == sorted(ALGORITHMS)


@pytest.mark.parametrize("script", SCRIPTS, ids=[os.path.basename(s) for s in SCRIPTS])
def test_script_is_accepted_and_every_key_resolves_to_what_it_sets(script: str, argv_stub: str, cfg_job_runs) -> None:
    overrides = _overrides(script, argv_stub)
    cfg = load_config(overrides)
    assert cfg.algorithm.adv_estimator == ALGORITHMS[os.path.basename(script)]
    for text in overrides:
        ov = parse_override(text)
        key = rename_aliased_key(ov.key, PPOConfig.key_aliases)
        assert override_found(text, cfg, PPOConfig.key_aliases), f"{text} -> {key} = {value_at(cfg, key)!r}"
    # the real command line prints the same config
    result = cfg_job_runs.result(script)
    assert result.returncode == 0, result.stderr[-2000:]
    assert yaml.safe_load(result.stdout) == OmegaConf.to_container(cfg, resolve=True)


def _cfg(name: str, stub: str):
    return load_config(_overrides(os.path.join(SCRIPT_DIR, name), stub))


def test_multi_gpu_scripts_run_on_ray_and_one_rank_locally(argv_stub: str) -> None:
    grpo = _cfg("run_qwen2_5_0_5b_grpo.sh", argv_stub)
    assert world_size(grpo) == 8 and resolve_backend(grpo.trainer) == "ray"
    multinode = _cfg("run_qwen2_5_7b_grpo_multinode_hsdp.sh", argv_stub)
    assert world_size(multinode) == 16 and resolve_backend(multinode.trainer) == "ray"
    one = load_config(
        [*_overrides(os.path.join(SCRIPT_DIR, "run_qwen2_5_0_5b_dr_grpo.sh"), argv_stub), "trainer.n_gpus_per_node=1"]
    )
    assert resolve_backend(one.trainer) == "local"


def test_ppo_scripts_set_the_critic_through_verls_key_names(argv_stub: str) -> None:
    ppo = _cfg("run_qwen2_5_0_5b_ppo.sh", argv_stub)
    assert ppo.critic.fsdp_config.param_offload is True and ppo.critic.fsdp_config.optimizer_offload is True
    balance = _cfg("run_qwen2_5_0_5b_ppo_seq_balance.sh", argv_stub)
    sizes = [balance.actor_rollout_ref.actor, balance.actor_rollout_ref.ref, balance.critic]
    assert [s.ulysses_sequence_parallel_size for s in sizes] == [2, 2, 2]
    adaptive = _cfg("run_qwen2_5_0_5b_ppo_adaptive_kl.sh", argv_stub)
    assert adaptive.critic.fsdp_config.fsdp_size == 4 and adaptive.critic.fsdp_config.reshard_after_forward is False


def test_dapo_reward_kwargs_reach_the_dapo_reward_manager(argv_stub: str, byte_tokenizer) -> None:
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.workers.reward_manager import DAPORewardManager

    cfg = _cfg("run_dapo_qwen2_5_0_5b.sh", argv_stub)
    manager = load_reward_manager(cfg, byte_tokenizer, num_examine=0)
    assert isinstance(manager, DAPORewardManager)
    assert manager.overlong_enable is True and manager.overlong_len == 2048 and manager.max_resp_len == 4096
    assert manager.overlong_penalty_factor == 1.0 and manager.overlong_log is False


def test_scheduler_names_old_and_new_select_the_cosine_schedule(argv_stub: str) -> None:
    import torch

    from verl.utils.optim import build_lr_scheduler

    def final_lr_ratio(optim_cfg) -> float:
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        sched = build_lr_scheduler(opt, optim_cfg, total_training_steps=20)
        for _ in range(20):
            opt.step()
            sched.step()
        return sched.get_last_lr()[0]

    cosine = _cfg("run_qwen2_5_0_5b_grpo_cosine.sh", argv_stub)
    assert final_lr_ratio(cosine.actor_rollout_ref.actor.optim) == pytest.approx(0.1)  # min_lr_ratio
    deprecated = _cfg("run_qwen2_5_0_5b_ppo_adaptive_kl.sh", argv_stub)
    assert final_lr_ratio(deprecated.critic.optim) == pytest.approx(0.0, abs=1e-6)
    assert final_lr_ratio(deprecated.actor_rollout_ref.actor.optim) == pytest.approx(1.0)  # constant


def test_v09_engine_keys_reach_the_worker_sections(argv_stub: str) -> None:
    from verl.workers.config import ActorRolloutRefConfig
    from verl.workers.fsdp_setup import private_section

    cfg = _cfg("run_qwen2_5_0_5b_grpo_v09_engine_keys.sh", argv_stub)
    assert cfg.model_engine == "fsdp"
    arr = private_section(cfg.actor_rollout_ref, ActorRolloutRefConfig)
    assert arr.actor.ulysses_sequence_parallel_size == 2 and arr.ref.ulysses_sequence_parallel_size == 2
    assert arr.actor.entropy_from_logits_with_chunking and arr.actor.entropy_checkpointing
    assert arr.actor.fsdp_config.forward_prefetch and arr.ref.strategy == "fsdp2" and arr.nccl_timeout == 3600
    assert arr.model.use_fused_kernels and arr.rollout.checkpoint_engine.update_weights_bucket_megabytes == 4096


def test_vllm_engine_options_become_engine_arguments(argv_stub: str) -> None:
    from verl.workers.rollout.vllm_rollout import engine_args_from_config

    multinode = _cfg("run_qwen2_5_7b_grpo_multinode_hsdp.sh", argv_stub).actor_rollout_ref.rollout
    args = engine_args_from_config(multinode, max_model_len=2048 + 4096)
    assert args["enable_chunked_prefill"] is False and args["max_num_batched_tokens"] == 8192
    assert args["load_format"] == "dummy" and args["enable_prefix_caching"] is True
    lora = _cfg("run_qwen2_5_0_5b_grpo_lora.sh", argv_stub).actor_rollout_ref.rollout
    assert engine_args_from_config(lora, max_model_len=1536)["load_format"] == "safetensors"
    assert lora.layered_summon is True
