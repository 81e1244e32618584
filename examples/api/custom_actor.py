"""Document 000, section 4.1: a custom ActorModel subclass overriding forward() and generate().

python examples/api/custom_actor.py [--tiny]
"""

from _common import done, fast_config, model_path, parse_args
from transformers import AutoTokenizer, LlamaForCausalLM

from verl import ActorModel, PPOTrainer

args = parse_args(__doc__)
path = model_path(args.tiny, args.output_dir)  # the document uses your-company/llama-3-8b-finetuned


class MyLlamaActor(ActorModel):
    def __init__(self, model_path):
        super().__init__()
        self.model = LlamaForCausalLM.from_pretrained(model_path)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)

    def forward(self, input_ids, attention_mask=None):
        return self.model(input_ids, attention_mask=attention_mask)

    def generate(self, input_ids, **kwargs):
        return self.model.generate(input_ids, **kwargs)


actor = MyLlamaActor(path)
before = actor.model.lm_head.weight.detach().cpu().clone()
trainer = PPOTrainer(
    actor_model=actor,
    reward_fn=lambda prompts, responses: [float(len(set(r))) for r in responses],
    config={
        "batch_size": 2,
        "num_samples": 2,
        "lr": 1e-4,
        "trainer.default_local_dir": args.output_dir,
        **fast_config(args.tiny),
    },
)
metrics = trainer.step(["Say hello.", "Count to three."])
changed = not actor.model.lm_head.weight.detach().cpu().equal(before)  # the trainer may have moved it to a GPU
done(f"loss={metrics['loss']:.4f} reward={metrics['reward']:.3f} weights updated in place: {changed}")
