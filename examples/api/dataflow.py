"""Document 001, section 2.1: the declarative dataflow ``actor.sample() >> reward_model.score() >> ppo.update()``.

The pipeline runs the same worker calls as PPOTrainer.step (generate -> reward -> log-probs -> advantages ->
updates) through the same single controller; it is a way to write the step, not a second engine.

    python examples/api/dataflow.py [--tiny]
"""

from _common import done, fast_config, model_path, parse_args
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl import Actor, PPOTrainer, RewardModel

args = parse_args(__doc__)
path = model_path(args.tiny, args.output_dir)
tokenizer = AutoTokenizer.from_pretrained(path)
actor = Actor(model=AutoModelForCausalLM.from_pretrained(path), tokenizer=tokenizer)
reward_model = RewardModel(lambda prompts, responses: [float(len(r.split())) for r in responses])
ppo = PPOTrainer(
    actor_model=actor,
    tokenizer=tokenizer,
    reward_fn=reward_model,
    config={"batch_size": 2, "num_samples": 2, "trainer.default_local_dir": args.output_dir, **fast_config(args.tiny)},
)

dataflow = (
    actor.sample()  # the actor generates responses
    >> reward_model.score()  # the reward model scores them
    >> ppo.update()  # PPO computes the update
)
print("pipeline:", dataflow)
for _ in range(2):
    metrics = dataflow.run(["Name a fruit.", "Name a colour."])
    print(f"step {metrics['step']}: reward={metrics['reward']:.3f} loss={metrics['loss']:.4f}")
done(f"responses of the last run: {tuple(dataflow.outputs['0:sample'].batch['responses'].shape)}")
