"""Document 002, section 3.3: log the training loop's reward, KL and policy loss to TensorBoard.

python examples/api/tensorboard_loop.py [--tiny]
tensorboard --logdir=<output-dir>/runs
"""

import os

from _common import done, fast_config, model_path, parse_args
from torch.utils.tensorboard import SummaryWriter
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl import ActorModel, DataProvider, PPOTrainer

args = parse_args(__doc__)
path = model_path(args.tiny, args.output_dir)
bundled_prompts = os.path.join(os.path.dirname(__import__("verl").__file__), "data", "arithmetic", "train.parquet")
trainer = PPOTrainer(
    actor_model=ActorModel(AutoModelForCausalLM.from_pretrained(path)),
    tokenizer=AutoTokenizer.from_pretrained(path),
    data_provider=DataProvider(bundled_prompts, batch_size=2),
    reward_fn="length",
    config={"batch_size": 2, "num_samples": 2, "trainer.default_local_dir": args.output_dir, **fast_config(args.tiny)},
)

writer = SummaryWriter(log_dir=os.path.join(args.output_dir, "runs", "verl_experiment_1"))
for step, metrics in enumerate(trainer.train(num_steps=3)):
    writer.add_scalar("train/reward", metrics["reward"], step)
    writer.add_scalar("train/kl_div", metrics["kl"], step)
    writer.add_scalar("train/loss", metrics["policy_loss"], step)
writer.close()
events = [f for _, _, files in os.walk(os.path.join(args.output_dir, "runs")) for f in files if "tfevents" in f]
done(f"{len(events)} TensorBoard event file(s) under {os.path.join(args.output_dir, 'runs')}")
