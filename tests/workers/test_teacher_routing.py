"""Multi-teacher on-policy distillation (upstream v0.9's ``distillation.teacher_models`` routed by
``distillation.teacher_key``): the teacher worker group scores each row with the teacher its column names, the
same log-probs as that teacher scoring the row alone; a value naming no teacher is an error naming row and value;
the per-teacher metrics; the config resolution of upstream's multi-teacher script."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from verl.protocol import DataProto
from verl.single_controller import create_worker_group
from verl.trainer.config import ConfigError, load_config
from verl.trainer.ppo.batch_transforms import apply_distillation_reward
from verl.workers.teacher import TeacherModel, TeacherWorker
from verl.workers.teacher_routing import route_rows, teacher_specs

KEYS = ("openai/gsm8k", "hiyouga/geometry3k")


@pytest.fixture(scope="module")
def two_teachers(tmp_path_factory, tiny_model_dir: str) -> tuple[str, str]:
    from verl.models.tiny import make_tiny_model_dir

    a = make_tiny_model_dir(str(tmp_path_factory.mktemp("teacher_a")), seed=1)
    b = make_tiny_model_dir(str(tmp_path_factory.mktemp("teacher_b")), seed=2)
    return a, b


def _section(paths: tuple[str, str], student: str) -> dict:
    cfg = load_config(["distillation.enable=true", f"distillation.teacher.path={student}"]).distillation
    cfg = OmegaConf.to_container(cfg)
    cfg["teacher"]["path"] = None
    cfg["teacher_models"] = {
        "teacher_model": cfg["teacher_models"]["teacher_model"],  # upstream's default entry: dropped
        "gsm8k": {"key": KEYS[0], "model_path": paths[0], "num_replicas": 1, "inference": {"dtype": "fp32"}},
        "geo3k": {"key": KEYS[1], "model_path": paths[1], "num_replicas": 1},
    }
    cfg["micro_batch_size_per_gpu"] = 2
    cfg["dtype"] = "float32"  # the teachers alone below run in float32 too
    return cfg


def _batch(sources: list[str]) -> DataProto:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 250, (len(sources), 9), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # a left-padded prompt
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "responses": ids[:, 4:]},
        non_tensors={"data_source": np.array(sources, dtype=object)},
    )


@pytest.mark.parametrize("world_size", [1, 2])
def test_rows_get_their_own_teachers_log_probs(two_teachers, tiny_model_dir: str, byte_tokenizer, world_size: int):
    sources = [KEYS[0], KEYS[1], KEYS[1], KEYS[0]]
    data = _batch(sources)
    cfg = _section(two_teachers, tiny_model_dir)
    group = create_worker_group(
        "local", TeacherWorker, {"config": cfg, "student_tokenizer": tiny_model_dir}, world_size=world_size
    )
    group.init_model()
    out = group.compute_teacher_log_prob(data)
    got = out.batch["teacher_log_prob"]
    assert list(out.non_tensor_batch["teacher_name"]) == ["gsm8k", "geo3k", "geo3k", "gsm8k"]
    alone = {}
    for name, path in zip(("gsm8k", "geo3k"), two_teachers):
        alone[name] = TeacherModel(path, byte_tokenizer).compute_log_prob(data, 1).batch["teacher_log_prob"]
    assert not torch.allclose(alone["gsm8k"], alone["geo3k"], atol=1e-3), "the two teachers must differ"
    for row, name in enumerate(out.non_tensor_batch["teacher_name"]):
        torch.testing.assert_close(got[row], alone[name][row], atol=1e-5, rtol=1e-5)


def test_unknown_routing_value_names_the_row_and_value(two_teachers, tiny_model_dir: str) -> None:
    worker_cfg = _section(two_teachers, tiny_model_dir)
    group = create_worker_group(
        "local", TeacherWorker, {"config": worker_cfg, "student_tokenizer": tiny_model_dir}, world_size=1
    )
    group.init_model()
    with pytest.raises(ValueError, match=r"row 2: data_source='lighteval/MATH' names no teacher"):
        group.compute_teacher_log_prob(_batch([KEYS[0], KEYS[1], "lighteval/MATH"]))
    with pytest.raises(ValueError, match="which the batch does not have"):
        route_rows(None, list(KEYS), "task", 3)
    # one teacher takes every row whatever its value (upstream's single-teacher path)
    assert route_rows(np.array(["x", "y"]), [None], "data_source", 2).tolist() == [0, 0]


def test_specs_follow_upstreams_entry_rules(tiny_model_dir: str) -> None:
    cfg = OmegaConf.create(_section(("/a", "/b"), tiny_model_dir))
    specs = teacher_specs(cfg)
    assert [(s.name, s.key, s.path, s.dtype) for s in specs] == [
        ("gsm8k", KEYS[0], "/a", "float32"),  # inference.dtype=fp32
        ("geo3k", KEYS[1], "/b", "float32"),  # null inference.dtype: distillation.dtype
    ]
    single = load_config(["distillation.enabled=true", "distillation.teacher_models.teacher_model.model_path=/t"])
    assert [(s.key, s.path) for s in teacher_specs(single.distillation)] == [(None, "/t")]


def test_per_teacher_metrics() -> None:
    student = torch.log(torch.tensor([[0.5, 0.5], [0.25, 0.5], [0.5, 0.5]]))
    teacher = torch.log(torch.tensor([[0.25, 0.5], [0.5, 0.5], [0.5, 0.5]]))
    data = DataProto.from_dict(
        tensors={
            "old_log_probs": student,
            "teacher_log_prob": teacher,
            "token_level_scores": torch.zeros(3, 2),
            "response_mask": torch.ones(3, 2),
        },
        non_tensors={"teacher_name": np.array(["gsm8k", "geo3k", "gsm8k"], dtype=object)},
    )
    _, metrics = apply_distillation_reward(data, coef=1.0)
    ln2 = float(np.log(2.0))
    assert metrics["distill/gsm8k/reverse_kl"] == pytest.approx(ln2 / 4)  # (ln2 + 0 + 0 + 0) / 4 tokens
    assert metrics["distill/geo3k/reverse_kl"] == pytest.approx(-ln2 / 2)
    assert metrics["distill/gsm8k/reward"] == pytest.approx(-ln2 / 2)  # per-sequence sums: -ln2 and 0
    assert metrics["distill/gsm8k/rows"] == 2 and metrics["distill/geo3k/rows"] == 1


MOPD = [
    "distillation.enabled=True",
    "distillation.n_gpus_per_node=4",
    "distillation.nnodes=1",
    "trainer.backend=ray",
    *[
        f"+distillation.teacher_models.{name}.{k}={v}"
        for name, key, path in (("gsm8k", KEYS[0], "/a"), ("geo3k", KEYS[1], "/b"))
        for k, v in (
            ("key", key),
            ("model_path", path),
            ("num_replicas", 1),
            ("inference.name", "vllm"),
            ("inference.tensor_model_parallel_size", 2),
            ("inference.gpu_memory_utilization", 0.4),
        )
    ],
]


def test_upstreams_multi_teacher_keys_resolve() -> None:
    cfg = load_config(MOPD)
    assert [s.name for s in teacher_specs(cfg.distillation)] == ["gsm8k", "geo3k"]
    assert cfg.distillation.gpu_memory_utilization == 0.4
    assert list(cfg.trainer.resource_pool_spec.teacher_pool) == [4]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["distillation.n_gpus_per_node=8"], "add up to 4, but the teacher pool"),
        (["distillation.teacher_models.teacher_model.model_path=/c"], "give it a name of its own"),
        (["distillation.teacher_models.geo3k.key=openai/gsm8k"], "also the key of distillation.teacher_models.gsm8k"),
        (["distillation.teacher_models.geo3k.inference.gpu_memory_utilization=0.5"], "the same value on every"),
        (["distillation.teacher.path=/t"], "both name the teacher"),
        (["distillation.teacher_models.geo3k.inference.dtype=int8"], "inference.dtype=int8"),
    ],
)
def test_multi_teacher_refusals_are_one_line(extra: list[str], needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config([*MOPD, *extra])
    assert len(err.value.problems) == 1 and needle in err.value.problems[0], err.value.problems
