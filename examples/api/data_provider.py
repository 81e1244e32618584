"""Document 000, section 5.1: DataProvider streams parquet batches with background prefetch into PPOTrainer.

The document reads s3://your-bucket/rlhf-dataset/ (works when s3fs is installed); here a local parquet directory.

    python examples/api/data_provider.py [--tiny]
"""

import os

import pyarrow as pa
import pyarrow.parquet as pq
from _common import done, fast_config, model_path, parse_args
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl import ActorModel, DataProvider, PPOTrainer

args = parse_args(__doc__)
data_dir = os.path.join(args.output_dir, "rlhf-dataset")
os.makedirs(data_dir, exist_ok=True)
for part in range(2):
    prompts = [f"What is {part * 4 + i} + {i}?" for i in range(4)]
    answers = [str(part * 4 + 2 * i) for i in range(4)]
    pq.write_table(
        pa.table({"prompt": prompts, "ground_truth": answers}), os.path.join(data_dir, f"part-{part}.parquet")
    )

data_provider = DataProvider(
    data_path=data_dir,
    file_format="parquet",
    prefetch_factor=4,  # batches prepared ahead
    num_workers=2,  # reader threads
    batch_size=2,
)

path = model_path(args.tiny, args.output_dir)
tokenizer = AutoTokenizer.from_pretrained(path)


def exact_match(prompts, responses):
    # the reward sees the text; ground truth is in the prompt here, so reward containing the sum's digits
    return [float(any(ch.isdigit() for ch in r)) for r in responses]


trainer = PPOTrainer(
    actor_model=ActorModel(AutoModelForCausalLM.from_pretrained(path)),
    tokenizer=tokenizer,
    data_provider=data_provider,
    reward_fn=exact_match,
    config={"batch_size": 2, "num_samples": 2, "trainer.default_local_dir": args.output_dir, **fast_config(args.tiny)},
)
for metrics in trainer.train(num_steps=3):
    print(f"step {metrics['step']}: reward={metrics['reward']:.3f} loss={metrics['loss']:.4f}")
done(f"{data_provider.batches_served} batches served from {len(data_provider.files)} files")
