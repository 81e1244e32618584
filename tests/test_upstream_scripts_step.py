"""scripts/upstream_scripts_step.py changes only what one CPU rank needs; the rest of a script runs as written."""

from __future__ import annotations

from scripts.upstream_scripts_step import one_step_args


def test_one_step_args_keep_the_scripts_keys_and_shrink_the_world() -> None:
    script = [
        "algorithm.adv_estimator=gae",
        "actor_rollout_ref.model.path=Qwen/Qwen3-8B",
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
        "actor_rollout_ref.actor.fsdp_config.fsdp_size=8",
        "actor_rollout_ref.actor.use_dynamic_bsz=True",
        "actor_rollout_ref.actor.ppo_micro_batch_size=128",
        "actor_rollout_ref.rollout.max_model_len=3072",
        "critic.model.path=Qwen/Qwen3-8B",
        "reward.reward_model.model_path=Skywork/Skywork-Reward-Llama-3.1-8B",
        "+distillation.teacher_models.gsm8k.model_path=Qwen/Qwen3-32B",
        "+distillation.teacher_models.gsm8k.inference.tensor_model_parallel_size=4",
        "ray_kwargs.ray_init.runtime_env.py_executable=uv -v run --frozen",
        "data.train_files=~/data/gsm8k/train.parquet",
    ]
    out = one_step_args(script, "/m", "/d", "/o", rollout="hf")
    assert "actor_rollout_ref.actor.use_dynamic_bsz=True" in out and "algorithm.adv_estimator=gae" in out
    assert not any(k in a for a in out for k in ("ulysses", "fsdp_size", "py_executable", "max_model_len"))
    assert "actor_rollout_ref.actor.ppo_micro_batch_size=128" not in out  # the global size would clash with ours
    assert "+distillation.teacher_models.gsm8k.inference.tensor_model_parallel_size=1" in out
    last = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in out}  # the later override wins
    assert last["actor_rollout_ref.model.path"] == last["critic.model.path"] == "/m"
    assert last["reward.reward_model.model_path"] == "/m"
    assert last["distillation.teacher_models.gsm8k.model_path"] == "/m"  # a second +key would be refused
    assert last["data.train_files"] == "/d/train.parquet" and last["trainer.n_gpus_per_node"] == "1"
    assert last["critic.ppo_micro_batch_size_per_gpu"] == "2" and last["trainer.backend"] == "ray"
    assert last["distillation.n_gpus_per_node"] == "1" and last["actor_rollout_ref.rollout.name"] == "hf"
    assert "data.train_files=~/data/gsm8k/train.parquet" not in out


def test_one_step_args_shrink_dapos_sizes_and_vary_the_score_under_dynamic_sampling() -> None:
    script = [
        "data.gen_batch_size=1536",
        "algorithm.filter_groups.enable=True",
        "reward.reward_kwargs.overlong_buffer_cfg.enable=True",
        "reward.reward_kwargs.overlong_buffer_cfg.len=4096",
        "reward.reward_kwargs.max_resp_len=20480",
    ]
    out = one_step_args(script, "/m", "/w/data", "/o", rollout=None)
    assert not any(a.endswith(("=1536", "=4096", "=20480")) for a in out)
    last = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in out}
    assert last["data.gen_batch_size"] == "2" and last["reward_model.overlong_buffer.len"] == "4"
    assert last["reward.custom_reward_function.path"] == "/w/varied_score.py"
    assert "reward.custom_reward_function.path" not in {
        a.split("=", 1)[0] for a in one_step_args(script[2:], "/m", "/w/data", "/o", rollout=None)
    }


def test_a_call_refused_only_for_sizes_the_harness_shrinks_is_trained() -> None:
    from scripts.upstream_scripts_step import only_sizes

    pool = "rollout.nnodes=2: a rollout pool across machines runs as Ray actors beside a trainer on Ray, and ..."
    split = "data.train_batch_size * actor_rollout_ref.rollout.n = 32 * 16 = 512 sequences per step do not split "
    split += "evenly over world size trainer.nnodes * trainer.n_gpus_per_node = 2 * 6 = 12 (512 % 12 = 8)"
    assert only_sizes({"errors": [pool, split]})
    assert not only_sizes({"errors": [pool, "a.b: unknown key"]}) and not only_sizes({"errors": []})
    tp = "actor_rollout_ref.rollout.tensor_model_parallel_size=4: each replica's ranks are on one node, so ..."
    assert only_sizes({"errors": [tp, split]})
