"""Document 002, section 5.1: export the trained policy in Hugging Face format and load it back with transformers.

python examples/api/export.py [--tiny]
"""

import os

import torch
from _common import done, fast_config, model_path, parse_args
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl import ActorModel, PPOTrainer

args = parse_args(__doc__)
path = model_path(args.tiny, args.output_dir)
trainer = PPOTrainer(
    actor_model=ActorModel(AutoModelForCausalLM.from_pretrained(path)),
    tokenizer=AutoTokenizer.from_pretrained(path),
    reward_fn="length",
    config={
        "batch_size": 2,
        "num_samples": 2,
        "lr": 1e-4,
        "trainer.default_local_dir": args.output_dir,
        **fast_config(args.tiny),
    },
)
trainer.step(["Hello", "Hi"])

out_dir = os.path.join(args.output_dir, "fine_tuned_llm_verl")
trainer.actor_model.save_pretrained(out_dir)
trainer.actor_tokenizer.save_pretrained(out_dir)

model = AutoModelForCausalLM.from_pretrained(out_dir)
tokenizer = AutoTokenizer.from_pretrained(out_dir)
trained = trainer.actor_model.hf_model.state_dict()
same = all(torch.equal(v, trained[k].cpu()) for k, v in model.state_dict().items())  # trained may be on a GPU
inputs = tokenizer("Hello", return_tensors="pt")
with torch.no_grad():
    outputs = model.generate(**inputs, max_new_tokens=8, do_sample=False)
print("response:", tokenizer.decode(outputs[0], skip_special_tokens=True))
done(f"exported to {out_dir}; reloaded weights equal the trained ones: {same}")
