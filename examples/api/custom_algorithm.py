"""Document 001, section 5: extend verl with your own algorithm by subclassing ``BaseAlgorithm``.

GRPO with a custom baseline: each response's advantage is its score minus the *median* score of its group (the
built-in GRPO uses the mean and divides by the standard deviation). The subclass only defines the advantage; it
trains through the standard driver (rollout, reward, log-probs, PPO clipped loss, optimizer, checkpoints).

    python examples/api/custom_algorithm.py [--tiny]
"""

import torch
from _common import done, fast_config, model_path, parse_args
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl import ActorModel, PPOTrainer
from verl.trainer import BaseAlgorithm


class MedianBaselineGRPO(BaseAlgorithm):
    name = "grpo_median"

    def compute_advantage(self, token_level_rewards, response_mask, index, **kwargs):
        scores = token_level_rewards.sum(-1)  # one score per response
        baseline = torch.stack([scores[torch.as_tensor(index == uid)].median() for uid in index])
        advantages = (scores - baseline).unsqueeze(-1) * response_mask
        return advantages, advantages


args = parse_args(__doc__)
path = model_path(args.tiny, args.output_dir)
trainer = PPOTrainer(
    actor_model=ActorModel(AutoModelForCausalLM.from_pretrained(path)),
    tokenizer=AutoTokenizer.from_pretrained(path),
    reward_fn=lambda prompts, responses: [float(len(set(r.split()))) for r in responses],
    config={
        "algorithm": MedianBaselineGRPO(),
        "batch_size": 2,
        "num_samples": 3,
        "trainer.default_local_dir": args.output_dir,
        **fast_config(args.tiny),
    },
)
for _ in range(2):
    metrics = trainer.step(["Name three animals.", "List some colours."])
    adv_max = metrics["critic/advantages/max"]
    print(f"step {metrics['step']}: reward={metrics['reward']:.3f} advantage max={adv_max:.3f}")
done(f"trained with algorithm.adv_estimator={trainer.config.algorithm.adv_estimator}")
