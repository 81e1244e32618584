"""Namespaces: two trainers in one process, same output base, different namespaces -> disjoint file trees.

Each trainer is a real RayPPOTrainer (tiny Llama, local backend, one GRPO step). The first also carries the
evaluators and a Prometheus exporter hook, so their metrics are checked end to end.
"""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from verl.api.evaluation import DiversityEvaluator, KLEvaluator

NAMESPACES = ("search-rl", "math-rl")


def _config(base: str, model: str, data: str, namespace: str | None, extra: tuple[str, ...] = ()):
    from verl.trainer.config import load_config

    overrides = [
        f"actor_rollout_ref.model.path={model}",
        f"data.train_files={data}/train.parquet",
        f"data.val_files={data}/test.parquet",
        "data.train_batch_size=2",
        "data.max_prompt_length=96",
        "data.max_response_length=4",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.dtype=float32",
        "actor_rollout_ref.rollout.dtype=float32",
        "trainer.total_training_steps=1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.export_hf=false",
        "trainer.plot=false",
        "trainer.device=cpu",
        "trainer.logger=[file,tensorboard]",
        f"trainer.default_local_dir={base}/out",
        f"trainer.rollout_data_dir={base}/rollouts",
    ]
    if namespace is not None:
        overrides.append(f"trainer.namespace={namespace}")
    return load_config(overrides + list(extra))


def _build_trainer(cfg):
    from verl.models.loader import load_tokenizer
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.trainer.ppo.runner import build_datasets

    tokenizer = load_tokenizer(cfg.actor_rollout_ref.model.path)
    train, val, sampler = build_datasets(cfg, tokenizer)
    return RayPPOTrainer(
        config=cfg,
        tokenizer=tokenizer,
        reward_fn=load_reward_manager(cfg, tokenizer, num_examine=0),
        val_reward_fn=load_reward_manager(cfg, tokenizer, num_examine=0),
        train_dataset=train,
        val_dataset=val,
        train_sampler=sampler,
    )


def _tree(root: str) -> dict[str, str]:
    """relative path -> sha256 of every file under root."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir):
    from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
    from verl.metrics import MetricsExporter

    base = str(tmp_path_factory.mktemp("ns"))
    train, test = generate_arithmetic_splits(8, 2, seed=0)
    write_parquet(train, f"{base}/data/train.parquet")
    write_parquet(test, f"{base}/data/test.parquet")
    exporter = MetricsExporter(namespace=NAMESPACES[0])
    exported: list[dict[str, float]] = []
    snapshots = {}
    for ns in NAMESPACES:
        trainer = _build_trainer(_config(base, tiny_model_dir, f"{base}/data", ns))
        trainer.init_workers()
        if ns == NAMESPACES[0]:
            trainer.evaluators += [DiversityEvaluator(n=2), KLEvaluator()]
            trainer.step_hooks.append(lambda step, metrics: exported.append(exporter.export(metrics, step)))
        trainer.fit()
        snapshots[ns] = _tree(os.path.join(base, "out", ns))
    yield {"base": base, "snapshots": snapshots, "exported": exported, "model": tiny_model_dir}


def test_each_namespace_gets_its_own_tree(runs):
    base = runs["base"]
    assert sorted(os.listdir(os.path.join(base, "out"))) == sorted(NAMESPACES)
    assert sorted(os.listdir(os.path.join(base, "rollouts"))) == sorted(NAMESPACES)
    for ns in NAMESPACES:
        root = os.path.join(base, "out", ns)
        assert os.path.isdir(os.path.join(root, "global_step_1", "actor"))
        assert open(os.path.join(root, "latest_checkpointed_iteration.txt")).read().strip() == "1"
        assert os.path.isfile(os.path.join(root, "logs", "metrics.jsonl"))
        assert os.listdir(os.path.join(root, "logs", "tensorboard"))
        assert os.path.isfile(os.path.join(base, "rollouts", ns, "1.jsonl"))


def test_the_second_trainer_did_not_touch_the_first_ones_files(runs):
    first = NAMESPACES[0]
    assert _tree(os.path.join(runs["base"], "out", first)) == runs["snapshots"][first]


def test_evaluators_and_exporter_ran_inside_the_loop(runs):
    first, second = (os.path.join(runs["base"], "out", ns, "logs", "metrics.jsonl") for ns in NAMESPACES)
    rows = [json.loads(line) for line in open(first)]
    metrics = rows[-1].get("data", rows[-1])
    for key in ("eval/kl_ref", "eval/diversity/distinct_1", "eval/diversity/ngram_entropy"):
        assert key in json.dumps(metrics), key
    # only the first trainer had evaluators
    assert "eval/kl_ref" not in open(second).read()
    assert len(runs["exported"]) == 1
    assert runs["exported"][0]["verl_global_step"] == 1.0
    assert runs["exported"][0]["verl_step_duration_seconds"] > 0
    assert "verl_reward_mean" in runs["exported"][0]


@pytest.mark.parametrize("bad", ["../escape", "a/b", "..", ".hidden", "with space", "-dash", "x" * 65])
def test_unsafe_namespaces_are_refused(runs, bad):
    from verl.trainer.config import ConfigError
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    before = sorted(os.listdir(os.path.join(runs["base"], "out")))
    # refused when the config is validated (main_ppo exits 2 with this message) ...
    with pytest.raises(ConfigError, match="trainer.namespace: invalid namespace"):
        _config(runs["base"], runs["model"], f"{runs['base']}/data", None, (f"trainer.namespace='{bad}'",))
    # ... and by the driver itself for configs that skipped validation
    cfg = _config(runs["base"], runs["model"], f"{runs['base']}/data", None, ())
    cfg.trainer.namespace = bad
    with pytest.raises(ValueError, match="invalid namespace"):
        RayPPOTrainer(config=cfg, tokenizer=None)
    assert sorted(os.listdir(os.path.join(runs["base"], "out"))) == before


def test_an_explicit_log_dir_is_namespaced_too(runs):
    cfg = _config(
        runs["base"], runs["model"], f"{runs['base']}/data", "search-rl", (f"trainer.log_dir={runs['base']}/logs",)
    )
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    trainer = RayPPOTrainer(config=cfg, tokenizer=None)
    tracker = trainer.report.make_tracker()
    try:
        assert tracker.log_dir == os.path.join(runs["base"], "logs", "search-rl")
    finally:
        tracker.finish()


def test_main_eval_scores_a_namespaced_checkpoint(runs, capsys):
    from verl.trainer.main_eval import main

    step_dir = os.path.join(runs["base"], "out", NAMESPACES[0], "global_step_1")
    args = [
        f"data.path={runs['base']}/data/test.parquet",
        f"model.path={step_dir}",
        "data.max_prompt_length=96",
        "rollout.response_length=4",
        "trainer.device=cpu",
    ]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["model_path"] == step_dir and result["num_prompts"] == 2
