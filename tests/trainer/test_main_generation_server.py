"""``python -m verl.trainer.main_generation_server`` (upstream v0.9's rollout-only generation): a parquet of chat
prompts in, the same rows plus a ``responses`` column of ``rollout.n`` strings per row out, with upstream's keys."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verl.trainer.main_generation_server import main

PROMPTS = [[{"role": "user", "content": t}] for t in ("2+2=?", "name a colour", "count to 3")]


def _args(prompts: str, out: str, model: str, *extra: str) -> list[str]:
    return [
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        "trainer.device=cpu",
        f"data.train_files={prompts}",
        "data.prompt_key=prompt",
        f"+data.output_path={out}",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.temperature=1.0",
        "actor_rollout_ref.rollout.top_k=50",
        "actor_rollout_ref.rollout.top_p=0.7",
        "actor_rollout_ref.rollout.prompt_length=64",
        "actor_rollout_ref.rollout.response_length=5",
        "actor_rollout_ref.rollout.max_num_seqs=4",
        "actor_rollout_ref.rollout.n=3",
        *extra,
    ]


def test_a_parquet_of_prompts_in_a_parquet_of_responses_out(tmp_path, tiny_model_dir: str) -> None:
    prompts = tmp_path / "prompts.parquet"
    # no data_source / reward_model: upstream reads only the prompt column; the other columns are written back
    pq.write_table(pa.table({"prompt": PROMPTS, "id": [7, 8, 9]}), prompts)
    out = tmp_path / "gen" / "out.parquet"
    assert main(_args(str(prompts), str(out), tiny_model_dir)) == 0
    table = pq.read_table(out)
    assert table.column_names == ["prompt", "id", "responses"]
    assert table.schema.field("responses").type == pa.list_(pa.string())
    rows = table.to_pylist()
    assert [r["id"] for r in rows] == [7, 8, 9] and [r["prompt"] for r in rows] == PROMPTS
    assert all(len(r["responses"]) == 3 and all(isinstance(s, str) for s in r["responses"]) for r in rows)
    assert any(s for r in rows for s in r["responses"]), "the tiny model generated text"


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["actor_rollout_ref.rollout.temperature=0"], "greedy responses are equal"),
        (["actor_rollout_ref.rollout.name=sglang"], "sglang"),
    ],
)
def test_bad_settings_are_one_line(tmp_path, tiny_model_dir: str, capsys, extra: list[str], needle: str) -> None:
    assert main(_args("p.parquet", str(tmp_path / "o.parquet"), tiny_model_dir, *extra, "--cfg", "job")) == 2
    assert needle in capsys.readouterr().err


def test_output_path_is_required(tmp_path, tiny_model_dir: str, capsys) -> None:
    args = [a for a in _args("p.parquet", "x", tiny_model_dir) if not a.startswith("+data.output_path")]
    assert main([*args, "--cfg", "job"]) == 2
    assert "data.output_path: missing key" in capsys.readouterr().err  # the key upstream adds with +


@pytest.mark.vllm
@pytest.mark.slow  # a vLLM CPU engine start (~40 s)
def test_the_vllm_engine_writes_the_same_shape(tmp_path) -> None:
    pytest.importorskip("vllm")
    from verl.models.tiny import TinyModelSpec, make_tiny_model_dir

    # vLLM's CPU attention kernels need head_dim >= 32 (tests/workers/rollout/test_vllm_rollout.py)
    spec = TinyModelSpec(arch="qwen2", hidden_size=128, num_attention_heads=2, num_key_value_heads=1)
    model = make_tiny_model_dir(str(tmp_path / "model"), spec=spec)
    prompts = tmp_path / "prompts.parquet"
    pq.write_table(pa.table({"prompt": PROMPTS[:2]}), prompts)
    out = tmp_path / "out.parquet"
    extra = ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.dtype=float32"]
    assert main(_args(str(prompts), str(out), model, *extra)) == 0
    rows = pq.read_table(out).to_pylist()
    assert [len(r["responses"]) for r in rows] == [3, 3] and [r["prompt"] for r in rows] == PROMPTS[:2]
