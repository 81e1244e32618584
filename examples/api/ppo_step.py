"""Document 000, section 3.3: the minimal PPO step (actor + critic, one prompt, built-in KL reward).

python examples/api/ppo_step.py [--tiny]
"""

from _common import device, done, fast_config, model_path, parse_args
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl import ActorModel, CriticModel, PPOTrainer

args = parse_args(__doc__)
model_name = model_path(args.tiny, args.output_dir)  # the document uses princeton-nlp/tinyllama-1.1b

# 1. load the model and tokenizer
tokenizer = AutoTokenizer.from_pretrained(model_name)
actor = ActorModel(AutoModelForCausalLM.from_pretrained(model_name))
critic = CriticModel(AutoModelForCausalLM.from_pretrained(model_name))

# 2. the trainer (one device)
trainer = PPOTrainer(
    actor_model=actor,
    critic_model=critic,
    tokenizer=tokenizer,
    config={
        "batch_size": 4,
        "rollout_batch_size": 8,
        "kl_coef": 0.1,
        "lr": 1e-6,
        "trainer.default_local_dir": args.output_dir,
        **fast_config(args.tiny),
    },
)

# 3. one test prompt (in practice from a DataProvider)
prompt = "Explain quantum computing in simple terms."
input_ids = tokenizer.encode(prompt, return_tensors="pt").to(device())

# 4. one rollout + update step; with no reward_fn the reward is the built-in KL penalty
output = trainer.step(input_ids)
print("training step done, loss:", output["loss"])
done(f"kl={output['kl']:.4f} reward={output['reward']:.4f} response_length={output['response_length']:.1f}")
