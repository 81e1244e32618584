"""Resuming the Python API's training from a checkpoint it saved (the CLI's resume machinery).

A run stops after 2 steps and saves; a new trainer built with ``resume_from=`` continues with step 3, the same
optimizer state and the same position in the data, and ends where an uninterrupted 4-step run ends.

    python examples/api/resume.py [--tiny]
"""

import os

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from _common import done, fast_config, model_path, parse_args
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl import ActorModel, DataProvider, PPOTrainer

args = parse_args(__doc__)
path = model_path(args.tiny, args.output_dir)
tokenizer = AutoTokenizer.from_pretrained(path)
data_file = os.path.join(args.output_dir, "prompts.parquet")
pq.write_table(pa.table({"prompt": [f"Count to {i}." for i in range(8)]}), data_file)


def make_trainer(run_dir, resume_from=None):
    torch.manual_seed(0)
    return PPOTrainer(
        actor_model=ActorModel(AutoModelForCausalLM.from_pretrained(path)),
        tokenizer=tokenizer,
        reward_fn=lambda prompts, responses: [float(len(set(r))) for r in responses],  # distinct characters
        data_provider=DataProvider(data_file, batch_size=2),
        resume_from=resume_from,
        config={
            "algorithm": "grpo",
            "batch_size": 2,
            "num_samples": 2,
            "lr": 1e-3 if args.tiny else 1e-5,
            "total_steps": 4,
            "trainer.default_local_dir": os.path.join(args.output_dir, run_dir),
            **fast_config(args.tiny),
        },
    )


uninterrupted = make_trainer("full")
full_norms = [m["grad_norm"] for m in uninterrupted.train(num_steps=4)]
uninterrupted.close()

first = make_trainer("parts")
for metrics in first.train(num_steps=2):
    print(f"step {metrics['step']}: grad_norm={metrics['grad_norm']:.5f}")
checkpoint = first.save_checkpoint()  # <default_local_dir>/global_step_2, marked complete
first.close()
print("saved", checkpoint)

resumed = make_trainer("parts", resume_from=checkpoint)  # or: trainer.load_checkpoint(checkpoint)
print("resumed at step", resumed.global_steps)
for metrics in resumed.train(num_steps=2):
    want = full_norms[metrics["step"] - 1]
    print(f"step {metrics['step']}: grad_norm={metrics['grad_norm']:.5f} (uninterrupted run: {want:.5f})")
same = all(
    torch.allclose(a, b) for a, b in zip(resumed.actor_model.parameters(), uninterrupted.actor_model.parameters())
)
resumed.close()
done(f"resumed run matches the uninterrupted one: {same}")
