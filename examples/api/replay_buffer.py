"""Document 000, section 2.1: the dataflow built from ``RolloutWorker``, ``RewardModel`` and ``ReplayBuffer``.

Each run generates and scores fresh rollouts, adds them to the buffer, and trains on 2 mini-batches drawn from
everything in it that is at most 3 updates old (at most 16 sequences are kept).

    python examples/api/replay_buffer.py [--tiny]
"""

from _common import done, fast_config, model_path, parse_args
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl import Actor, PPOTrainer, ReplayBuffer, RewardModel, RolloutWorker

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

buffer = ReplayBuffer(capacity=16, max_age=3, updates_per_step=2)
dataflow = RolloutWorker(actor) >> reward_model.score() >> buffer >> ppo.update()
print("pipeline:", dataflow)
for _ in range(3):
    metrics = dataflow.run(["Name a fruit.", "Name a colour."])
    print(
        f"step {metrics['step']}: reward={metrics['reward']:.3f} buffer={metrics['replay/size']:.0f} sequences, "
        f"oldest served {metrics['replay/age/max']:.0f} updates old"
    )
done(f"{ppo.global_steps} updates from 3 rollout batches; buffer holds {len(buffer)} sequences")
