"""Document 002, section 3.2: a custom evaluator registered on the trainer, run after every step.

The evaluator is the document's, with its imports: ``BaseTrainer`` from verl.trainer (what ``evaluate`` receives:
``actor_model.generate``, ``reward_model(...)``, the tokenizer) and ``Evaluator`` from verl.utils.evaluation.

    python examples/api/evaluator.py [--tiny]
"""

import torch
from _common import done, fast_config, model_path, parse_args
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl import ActorModel, PPOTrainer, RewardModel
from verl.trainer import BaseTrainer
from verl.utils.evaluation import Evaluator

args = parse_args(__doc__)
path = model_path(args.tiny, args.output_dir)
tokenizer = AutoTokenizer.from_pretrained(path)


class CustomEvaluator(Evaluator):
    def __init__(self, eval_dataloader):
        self.eval_dataloader = eval_dataloader

    def evaluate(self, trainer: BaseTrainer):
        total_reward = 0.0
        count = 0
        for batch in self.eval_dataloader:
            with torch.no_grad():
                output = trainer.actor_model.generate(batch["input_ids"], max_new_tokens=8, do_sample=False)
            reward = trainer.reward_model(output)
            total_reward += reward.mean().item()
            count += 1
        avg_reward = total_reward / count
        return {"avg_reward": avg_reward}


trainer = PPOTrainer(
    actor_model=ActorModel(AutoModelForCausalLM.from_pretrained(path)),
    tokenizer=tokenizer,
    reward_fn=RewardModel(lambda prompts, responses: [float(len(r)) for r in responses]),
    config={"batch_size": 2, "num_samples": 2, "trainer.default_local_dir": args.output_dir, **fast_config(args.tiny)},
)
# built after the trainer: it has aligned the tokenizer (pad token, left padding) with the model
enc = tokenizer(["Hello there", "Good day"], return_tensors="pt", padding=True)
eval_loader = [{"input_ids": enc.input_ids}]
trainer.register_evaluator(CustomEvaluator(eval_loader))
for _ in range(2):
    metrics = trainer.step(["Tell me a joke.", "Describe the sea."])
    print(f"step {metrics['step']}: avg_reward={metrics['avg_reward']:.2f}")
done("evaluator ran after every step")
