"""Document 000, section 5.5: two trainers on one machine, isolated by namespace (checkpoints, logs, metrics).

python examples/api/namespaces.py [--tiny]
"""

import os

from _common import done, fast_config, model_path, parse_args
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl import ActorModel, PPOTrainer

args = parse_args(__doc__)
path = model_path(args.tiny, args.output_dir)
tokenizer = AutoTokenizer.from_pretrained(path)
config = {"batch_size": 2, "trainer.default_local_dir": os.path.join(args.output_dir, "ckpt"), **fast_config(args.tiny)}


def make(namespace):
    actor = ActorModel(AutoModelForCausalLM.from_pretrained(path))
    return PPOTrainer(actor_model=actor, tokenizer=tokenizer, config=config, namespace=namespace, reward_fn="length")


trainer_a = make("search-rl")
trainer_b = make("rec-rl")
for trainer in (trainer_a, trainer_b):
    trainer.step(["hi", "yo"])
    print(trainer.namespace, "->", trainer.save_checkpoint())
done(f"checkpoint roots: {sorted(os.listdir(os.path.join(args.output_dir, 'ckpt')))}")
