"""``python -m verl.model_merger merge`` on a checkpoint written by a real (tiny) PPO run.

The merged directory must load with ``AutoModelForCausalLM.from_pretrained`` and generate, greedily, exactly the
tokens the trainer's own greedy validation generated with the trained actor (recorded from the driver's
generation calls, token ids rather than decoded text, which the byte tokenizer decodes lossily). The CLI's
``main`` is called in-process: the same argument parsing and code as the ``-m`` entry point, without a second
interpreter.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.model_merger.__main__ import main as merger_main
from verl.protocol import DataProto
from verl.trainer.config import load_config
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.runner import run_ppo

RESPONSE_LENGTH = 8
STEPS = 4

REWARD_SOURCE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return sum(1 for ch in solution_str if ord(ch) < 128) / len(solution_str) if solution_str else 0.0
"""


@pytest.fixture(scope="module")
def trained_run(tiny_model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, DataProto]]:
    """Four GRPO steps at a high learning rate with greedy validation before and after; returns the output dir and
    the validation generations by step."""
    root = tmp_path_factory.mktemp("merge_run")
    train, test = generate_arithmetic_splits(train_size=16, test_size=4, seed=6)
    write_parquet(train, str(root / "train.parquet"))
    write_parquet(test, str(root / "test.parquet"))
    (root / "reward.py").write_text(REWARD_SOURCE)
    out = root / "out"
    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            f"data.train_files={root / 'train.parquet'}",
            f"data.val_files={root / 'test.parquet'}",
            f"custom_reward_function.path={root / 'reward.py'}",
            "data.train_batch_size=4",
            "data.max_prompt_length=128",
            f"data.max_response_length={RESPONSE_LENGTH}",
            "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
            "actor_rollout_ref.actor.dtype=float32",
            "actor_rollout_ref.rollout.dtype=float32",
            "actor_rollout_ref.actor.optim.lr=1e-2",
            f"trainer.total_training_steps={STEPS}",
            f"trainer.test_freq={STEPS}",
            "trainer.val_before_train=true",
            "trainer.logger=[file]",
            "trainer.export_hf=false",
            "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
            "trainer.plot=false",
            "trainer.resume_mode=disable",
            f"trainer.default_local_dir={out}",
        ]
    )
    validation: dict[int, DataProto] = {}
    real_generate = RayPPOTrainer.generate

    def recording_generate(self: RayPPOTrainer, gen_batch: DataProto) -> DataProto:
        output = real_generate(self, gen_batch)
        if gen_batch.meta_info.get("validate"):
            validation[self.global_steps] = output
        return output

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RayPPOTrainer, "generate", recording_generate)
        run_ppo(cfg)
    assert sorted(validation) == [0, STEPS]
    return out, validation


def _valid_responses(output: DataProto) -> list[list[int]]:
    """Each response up to and including its EOS (the rollout pads after it)."""
    return [row[mask.bool()].tolist() for row, mask in zip(output.batch["responses"], output.batch["response_mask"])]


def _greedy_responses(model_dir: str, output: DataProto) -> list[list[int]]:
    """Greedy continuations of the validation prompts (left padding removed) by the model in ``model_dir``."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    eos = model.generation_config.eos_token_id
    responses = []
    for prompt, prompt_mask in zip(output.batch["prompts"], output.batch["attention_mask"]):
        ids = prompt[prompt_mask[: prompt.shape[0]].bool()].unsqueeze(0)
        with torch.no_grad():
            generated = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=RESPONSE_LENGTH,
                do_sample=False,
                eos_token_id=eos,
                pad_token_id=model.generation_config.pad_token_id,
            )
        responses.append(generated[0, ids.shape[1] :].tolist())
    return responses


def test_merged_checkpoint_generates_what_the_trained_actor_generated(
    trained_run: tuple[Path, dict[int, DataProto]], tmp_path: Path
) -> None:
    out, validation = trained_run
    target = tmp_path / "merged"
    local_dir = str(out / f"global_step_{STEPS}" / "actor")
    assert merger_main(["merge", "--backend", "fsdp", "--local_dir", local_dir, "--target_dir", str(target)]) == 0
    assert (target / "config.json").is_file()

    after = _valid_responses(validation[STEPS])
    # training moved the greedy outputs, so agreeing with the final outputs is specific to the trained weights
    assert after != _valid_responses(validation[0])
    assert _greedy_responses(str(target), validation[STEPS]) == after


def test_merged_checkpoint_in_bfloat16_loads(trained_run: tuple[Path, dict[int, DataProto]], tmp_path: Path) -> None:
    out, _ = trained_run
    target = tmp_path / "merged_bf16"
    local_dir = str(out / f"global_step_{STEPS}" / "actor")
    assert merger_main(["merge", "--local_dir", local_dir, "--target_dir", str(target), "--dtype", "bfloat16"]) == 0
    model = AutoModelForCausalLM.from_pretrained(str(target))
    assert next(model.parameters()).dtype == torch.bfloat16


def test_test_operation_after_a_save_with_hf_model(
    trained_run: tuple[Path, dict[int, DataProto]], tiny_model_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Upstream CI's check: the weights reassembled from the rank shards equal the save's Hugging Face weights,
    and differ from the model the run started from."""
    out, _ = trained_run
    local_dir = str(out / f"global_step_{STEPS}" / "actor")
    argv = ["test", "--backend", "fsdp", "--local_dir", local_dir, "--test_hf_dir"]
    assert merger_main([*argv, f"{local_dir}/huggingface"]) == 0
    assert "match" in capsys.readouterr().out
    assert merger_main([*argv, tiny_model_dir]) == 1
    assert "values differ" in capsys.readouterr().err
