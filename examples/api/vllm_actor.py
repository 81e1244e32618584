"""Document 000, section 4.3: vLLMActor wraps an existing vllm.LLM engine as the actor's rollout engine.

Needs vLLM and a GPU; without them the example says so and exits successfully.

    python examples/api/vllm_actor.py [--tiny]
"""

import importlib.util

import torch
from _common import done, model_path, parse_args

args = parse_args(__doc__)
if importlib.util.find_spec("vllm") is None or not torch.cuda.is_available():
    done("skipped: vLLMActor needs vLLM and a GPU (pip install -e .[vllm-cuda])")
    raise SystemExit(0)

from vllm import LLM  # noqa: E402

from verl import PPOTrainer, vLLMActor  # noqa: E402

path = model_path(args.tiny, args.output_dir)  # the document uses meta-llama/Llama-3.1-8B with TP=4 and AWQ
llm_engine = LLM(model=path, tensor_parallel_size=1, enforce_eager=True, gpu_memory_utilization=0.3)
actor = vLLMActor(llm_engine)
trainer = PPOTrainer(
    actor_model=actor,
    reward_fn="length",
    config={"batch_size": 2, "num_samples": 2, "max_new_tokens": 16, "trainer.default_local_dir": args.output_dir},
)
metrics = trainer.step(["Hello", "Write a haiku"])  # generation runs in vLLM; its weights follow each update
done(f"loss={metrics['loss']:.4f} gen time={metrics.get('timing_s/gen', 0):.3f}s")
