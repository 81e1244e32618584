"""Document 000, section 5.2: checkpoints without optimizer or training state (weights only).

The document also wraps the model in FSDP and torch.compile; the workers shard with FSDP2 themselves when the
trainer runs on several ranks, so nothing else is needed here.

    python examples/api/save_checkpoint.py [--tiny]
"""

import os

from _common import done, fast_config, model_path, parse_args
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl import ActorModel, PPOTrainer

args = parse_args(__doc__)
path = model_path(args.tiny, args.output_dir)
trainer = PPOTrainer(
    actor_model=ActorModel(AutoModelForCausalLM.from_pretrained(path)),
    tokenizer=AutoTokenizer.from_pretrained(path),
    reward_fn="length",
    config={"batch_size": 2, "num_samples": 2, "trainer.default_local_dir": args.output_dir, **fast_config(args.tiny)},
)
trainer.step(["hello", "world"])

ckpt = trainer.save_checkpoint(
    path=os.path.join(args.output_dir, "ckpt"),
    save_optimizer=False,  # managed by the surrounding job
    save_training_state=False,
)
for root, _, files in sorted(os.walk(ckpt)):
    for name in sorted(files):
        print(os.path.relpath(os.path.join(root, name), ckpt))
# every rank writes its own shard of the weights (and of the optimizer state, in a full checkpoint)
optim_shard = os.path.join("actor", "optim_world_size_1_rank_0.safetensors")
assert not os.path.exists(os.path.join(ckpt, optim_shard))
full = trainer.save_checkpoint(path=os.path.join(args.output_dir, "ckpt_full"))
assert os.path.exists(os.path.join(full, optim_shard))

# a Hugging Face directory from the shards (the same as `python -m verl.model_merger merge ...`)
from verl.model_merger import merge_checkpoint  # noqa: E402

hf_dir = merge_checkpoint(os.path.join(ckpt, "actor"), os.path.join(args.output_dir, "hf"))
AutoModelForCausalLM.from_pretrained(hf_dir)
done(f"weights-only checkpoint at {ckpt}; full checkpoint at {full}; Hugging Face export at {hf_dir}")
