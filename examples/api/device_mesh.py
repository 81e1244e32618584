"""Document 000, section 4.2: DeviceMesh, adapted to a local gloo process group (the document uses Megatron's
parallel_state groups). The model's placement is kept; the "data" mesh splits prompts and averages gradients.

    python examples/api/device_mesh.py [--tiny]
"""

import os

import torch.distributed as dist
from _common import done, fast_config, model_path, parse_args
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl import ActorModel, DeviceMesh, PPOTrainer

args = parse_args(__doc__)
path = model_path(args.tiny, args.output_dir)

# a one-process gloo group stands in for the groups Megatron (or torchrun) would have created
dist.init_process_group("gloo", init_method=f"file://{os.path.join(args.output_dir, 'pg_store')}", rank=0, world_size=1)
tp_mesh = DeviceMesh("tensor", dist.new_group([0]))
dp_mesh = DeviceMesh("data", dist.group.WORLD)

actor = ActorModel(AutoModelForCausalLM.from_pretrained(path))
actor.set_device_mesh(tp_mesh, dp_mesh)  # recorded; nothing is re-sharded
trainer = PPOTrainer(
    actor_model=actor,
    tokenizer=AutoTokenizer.from_pretrained(path),
    reward_fn="length",
    config={"batch_size": 2, "num_samples": 2, "trainer.default_local_dir": args.output_dir, **fast_config(args.tiny)},
)
metrics = trainer.step(["a", "b"])
print("meshes:", actor.device_meshes)
trainer.close()
dist.destroy_process_group()
done(f"loss={metrics['loss']:.4f} data-parallel size={dp_mesh.size}")
