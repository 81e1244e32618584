"""DPO and KTO through LoRA adapters: the reference is the adapter-disabled base, so no second model is loaded.

python examples/api/preference_lora.py [--tiny]
"""

import math
import os

from _common import done, model_path, parse_args
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl import DPOTrainer, KTOTrainer

args = parse_args(__doc__)
path = model_path(args.tiny, args.output_dir)
tokenizer = AutoTokenizer.from_pretrained(path)
lora = {"model.lora_rank": 8, "model.lora_alpha": 16, "model.dtype": "float32", "trainer.logger": []}
pairs = [
    {"prompt": f"What is {a} + {b}?", "chosen": f"{a + b}", "rejected": f"{a + b + 1}"}
    for a, b in [(1, 2), (3, 4), (5, 6), (7, 8)]
]
unpaired = [
    {"prompt": row["prompt"], "completion": row[key], "label": key == "chosen"}
    for row in pairs
    for key in ("chosen", "rejected")
]

dpo = DPOTrainer(
    model=AutoModelForCausalLM.from_pretrained(path), tokenizer=tokenizer, dataset=pairs, max_length=64, config=lora
)
trainable = sum(p.numel() for p in dpo.model.parameters() if p.requires_grad)
total = sum(p.numel() for p in dpo.model.parameters())
print(f"DPO: reference model = {dpo.ref_model}; trainable {trainable} of {total} parameters (adapters)")
start = dpo.evaluate(pairs)["eval/loss"]
out = dpo.train(
    num_train_epochs=4,
    per_device_train_batch_size=4,
    learning_rate=5e-3 if args.tiny else 5e-4,
    output_dir=os.path.join(args.output_dir, "dpo_lora"),
)
print(f"DPO loss {start:.4f} (log 2 = {math.log(2):.4f}) -> {dpo.evaluate(pairs)['eval/loss']:.4f}")

kto = KTOTrainer(
    model=AutoModelForCausalLM.from_pretrained(path), tokenizer=tokenizer, dataset=unpaired, max_length=64, config=lora
)
start = kto.evaluate(unpaired)["eval/loss"]
kto.train(
    num_train_epochs=4,
    per_device_train_batch_size=4,
    learning_rate=5e-3 if args.tiny else 5e-4,
    output_dir=os.path.join(args.output_dir, "kto_lora"),
)
print(f"KTO loss {start:.4f} -> {kto.evaluate(unpaired)['eval/loss']:.4f}")
merged = os.path.join(args.output_dir, "dpo_lora", "hf_model")
AutoModelForCausalLM.from_pretrained(merged)  # the export is a plain (merged) transformers model
done(f"LoRA DPO and KTO trained against the adapter-disabled base; merged export at {merged}")
