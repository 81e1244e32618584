"""Document 001, section 4: a DPO run with DPOTrainer (offline preference optimisation, Bradley-Terry loss).

The document loads "ultrachat" from the hub and Qwen/Qwen2-0.5B; here a small in-memory preference set and the
bundled model (or the tiny one).

    python examples/api/dpo.py [--tiny]
"""

import os

from _common import done, model_path, parse_args
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl import DPOTrainer

args = parse_args(__doc__)
path = model_path(args.tiny, args.output_dir)
model = AutoModelForCausalLM.from_pretrained(path)
tokenizer = AutoTokenizer.from_pretrained(path)

# rows with 'prompt', 'chosen', 'rejected' (a datasets.Dataset, a DataFrame or parquet/jsonl paths work too)
dataset = [
    {"prompt": f"What is {a} + {b}?", "chosen": f"{a + b}", "rejected": f"{a + b + 1}"}
    for a, b in [(1, 2), (3, 4), (5, 6), (7, 8), (2, 2), (4, 1), (6, 3), (9, 0)]
]

trainer = DPOTrainer(
    model=model,
    tokenizer=tokenizer,
    dataset=dataset,
    beta=0.1,  # DPO temperature: how strongly preferences are enforced
    max_length=64 if args.tiny else 256,
)
metrics = trainer.train(
    num_train_epochs=1,
    per_device_train_batch_size=2,
    learning_rate=5e-7,
    output_dir=os.path.join(args.output_dir, "dpo_output"),
)
print({k: round(float(v), 4) for k, v in sorted(metrics.items()) if isinstance(v, (int, float))})
done("DPO finished")
