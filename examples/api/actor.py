"""Document 001, section 2.4: ``Actor(model=..., tokenizer=...)`` aligns pad/eos ids automatically.

python examples/api/actor.py [--tiny]
"""

from _common import done, model_path, parse_args
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl import Actor

args = parse_args(__doc__)
path = model_path(args.tiny, args.output_dir)  # the document uses meta-llama/Llama-3.1-8B
model = AutoModelForCausalLM.from_pretrained(path)
tokenizer = AutoTokenizer.from_pretrained(path)
if args.tiny:
    tokenizer.pad_token = None  # like Llama's tokenizer: no pad token at all

actor = Actor(model=model, tokenizer=tokenizer)  # that is all

print("tokenizer pad/eos:", tokenizer.pad_token_id, tokenizer.eos_token_id, "padding side:", tokenizer.padding_side)
print("model.config pad/eos:", model.config.pad_token_id, model.config.eos_token_id)
print("generation_config pad/eos:", model.generation_config.pad_token_id, model.generation_config.eos_token_id)
assert tokenizer.pad_token_id is not None and model.config.pad_token_id == tokenizer.pad_token_id
done("pad/eos aligned")
