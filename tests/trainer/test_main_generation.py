"""``python -m verl.trainer.main_generation`` (January 2026's offline generation) with January's config keys: a
parquet of chat prompts in, the same rows plus ``responses`` (``data.n_samples`` strings per row) out."""

from __future__ import annotations

import dataclasses
from importlib import resources

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from verl.trainer.main_generation import GenerationConfig, main

PROMPTS = [[{"role": "user", "content": t}] for t in ("2+2=?", "name a colour", "count to 3")]


def _args(prompts: str, out: str, model: str, *extra: str) -> list[str]:
    return [
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        "trainer.device=cpu",
        f"data.path={prompts}",
        "data.prompt_key=prompt",
        "data.n_samples=2",
        "data.batch_size=2",
        f"data.output_path={out}",
        f"model.path={model}",
        "rollout.name=hf",
        "rollout.dtype=float32",
        "rollout.prompt_length=64",
        "rollout.response_length=4",
        *extra,
    ]


def test_packaged_yaml_defaults_equal_the_dataclass_defaults() -> None:
    text = resources.files("verl.trainer.config").joinpath("generation.yaml").read_text()
    yaml_values = OmegaConf.to_container(OmegaConf.create(text))
    typed = dataclasses.asdict(GenerationConfig())
    assert typed["model"].pop("trust_remote_code") is False  # added with + in upstream's scripts
    assert typed == yaml_values


def test_prompts_in_responses_out(tmp_path, tiny_model_dir: str) -> None:
    prompts = tmp_path / "prompts.parquet"
    pq.write_table(pa.table({"prompt": PROMPTS, "id": [7, 8, 9]}), prompts)
    out = tmp_path / "gen" / "out.parquet"
    assert main(_args(str(prompts), str(out), tiny_model_dir, "+model.trust_remote_code=False")) == 0
    table = pq.read_table(out)
    assert table.column_names == ["prompt", "id", "responses"]
    assert table.schema.field("responses").type == pa.list_(pa.string())
    rows = table.to_pylist()
    assert [r["id"] for r in rows] == [7, 8, 9] and [r["prompt"] for r in rows] == PROMPTS
    assert all(len(r["responses"]) == 2 for r in rows)
    assert any(s for r in rows for s in r["responses"]), "the tiny model generated text"


def test_remote_code_is_refused_where_the_model_has_code(tmp_path, model_dir_with_code, tiny_model_dir, capsys) -> None:
    out = str(tmp_path / "o.parquet")
    assert main(_args("p.parquet", out, model_dir_with_code, "+model.trust_remote_code=True", "--cfg", "job")) == 2
    assert "model.trust_remote_code=true runs Python files" in capsys.readouterr().err
    assert main(_args("p.parquet", out, tiny_model_dir, "+model.trust_remote_code=True", "--cfg", "job")) == 0


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["rollout.n=4"], "rollout.n=4: does nothing in generation here; set data.n_samples"),
        (["actor.ulysses_sequence_parallel_size=2"], "actor.ulysses_sequence_parallel_size=2: does nothing"),
        (["ray_kwargs.ray_init.num_cpus=4"], "ray_kwargs.ray_init.num_cpus=4: does nothing"),
        (["model.external_lib=my_models"], "trainer.allow_unsafe_operations=true"),
        (["rollout.do_sample=false"], "data.n_samples=2 with greedy decoding"),
        (["rollout.name=vllm", "rollout.tensor_model_parallel_size=2"], "must divide"),
    ],
)
def test_keys_we_cannot_honour_are_one_line(tmp_path, tiny_model_dir, capsys, extra, needle) -> None:
    assert main(_args("p.parquet", str(tmp_path / "o.parquet"), tiny_model_dir, *extra, "--cfg", "job")) == 2
    err = capsys.readouterr().err
    assert needle in err and len([ln for ln in err.splitlines() if ln.startswith("  - ")]) == 1
