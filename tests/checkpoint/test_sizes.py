"""A checkpoint's size split into weights and optimizer state, and the save line that says it."""

from __future__ import annotations

from pathlib import Path

from verl.checkpoint.sizes import checkpoint_bytes, checkpoint_size_line, format_bytes


def _write(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)


def test_bytes_by_kind_and_the_line(tmp_path: Path) -> None:
    step = tmp_path / "global_step_3"
    _write(step / "actor" / "model_world_size_1_rank_0.safetensors", 4000)  # fp32 weights: 4 bytes each
    _write(step / "actor" / "optim_world_size_1_rank_0.safetensors", 8000)  # AdamW: two fp32 moments each
    _write(step / "actor" / "extra_state_world_size_1_rank_0.pt", 100)
    _write(step / "data.pt", 50)
    assert checkpoint_bytes(str(step)) == {"model": 4000, "optimizer": 8000, "other": 150}
    line = checkpoint_size_line(str(step))
    assert line.startswith(f"checkpoint {step}: 12.2 kB (weights 4.0 kB; optimizer state 8.0 kB: AdamW's two fp32")
    assert "actor_rollout_ref.actor.checkpoint.save_contents=[model,extra] leaves it out" in line


def test_without_optimizer_state(tmp_path: Path) -> None:
    _write(tmp_path / "actor" / "model_world_size_1_rank_0.safetensors", 10)
    assert "no optimizer state: a resume restarts the optimizer" in checkpoint_size_line(str(tmp_path))


def test_format_bytes() -> None:
    assert [format_bytes(n) for n in (5, 1500, 2_500_000, 1_620_000_000)] == ["5 B", "1.5 kB", "2.5 MB", "1.6 GB"]
