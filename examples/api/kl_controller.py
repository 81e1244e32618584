"""Document 002, section 4.2: the adaptive KL controller from a ``config.yaml`` block.

``kl_controller`` maps onto ``algorithm.kl_ctrl`` and puts the KL penalty in the reward, where the controller
acts: ``beta <- min(beta * (1 + clip(KL / target_kl - 1, -0.2, 0.2) * n / horizon), kl_coef_max)``. While the
measured KL stays below ``target_kl`` the coefficient decays; above it, it grows, never past ``kl_coef_max``.

    python examples/api/kl_controller.py [--tiny]
"""

import os

from _common import done, fast_config, model_path, parse_args
from omegaconf import OmegaConf
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl import ActorModel, PPOTrainer

args = parse_args(__doc__)
path = model_path(args.tiny, args.output_dir)

config_file = os.path.join(args.output_dir, "config.yaml")
with open(config_file, "w", encoding="utf-8") as f:
    f.write(
        "kl_controller:\n"
        "  type: adaptive\n"
        "  target_kl: 0.05\n"
        "  kl_coef: 0.5\n"
        "  kl_coef_max: 1.0\n"
        "  horizon: 8   # short, so the coefficient moves visibly in a few steps (default 10000)\n"
    )
config = OmegaConf.to_container(OmegaConf.load(config_file))

trainer = PPOTrainer(
    actor_model=ActorModel(AutoModelForCausalLM.from_pretrained(path)),
    tokenizer=AutoTokenizer.from_pretrained(path),
    # distinct characters of the response: varies between samples, so the policy moves and the KL grows
    reward_fn=lambda prompts, responses: [float(len(set(r))) for r in responses],
    config={
        **config,
        "algorithm": "grpo",
        "batch_size": 2,
        "num_samples": 2,
        "lr": 1e-2 if args.tiny else 1e-5,
        "trainer.default_local_dir": args.output_dir,
        **fast_config(args.tiny),
    },
)
print("algorithm.kl_ctrl:", OmegaConf.to_container(trainer.config.algorithm.kl_ctrl))
coefs = []
for _ in range(3):
    metrics = trainer.step(["Tell me a story.", "Describe a tree."])
    coefs.append(metrics["actor/reward_kl_penalty_coeff"])
    print(f"step {metrics['step']}: kl={metrics['kl']:.4f} kl_coef={coefs[-1]:.4f}")
assert max(coefs) <= 1.0
done(f"adaptive KL coefficient stayed within kl_coef_max: {max(coefs):.4f} <= 1.0")
