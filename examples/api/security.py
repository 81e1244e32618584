"""Document 000, section 5.4: the production safety switches (all off).

python examples/api/security.py [--tiny]
"""

from _common import done, fast_config, model_path, parse_args
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl import ActorModel, PPOTrainer
from verl.utils.security import UnsafeOperationError, get_security_policy, require_unsafe

args = parse_args(__doc__)
path = model_path(args.tiny, args.output_dir)
trainer = PPOTrainer(
    actor_model=ActorModel(AutoModelForCausalLM.from_pretrained(path)),
    tokenizer=AutoTokenizer.from_pretrained(path),
    config={
        "enable_profiling": False,  # no torch.profiler traces
        "enable_debug_mode": False,  # no anomaly detection / debug logging
        "allow_unsafe_operations": False,  # no eval/exec of model output, no arbitrary unpickling
        "batch_size": 2,
        "trainer.default_local_dir": args.output_dir,
        **fast_config(args.tiny),
    },
)
print("policy:", get_security_policy())
try:
    require_unsafe("eval() of a model answer")
except UnsafeOperationError as err:
    print("refused as expected:", err)
done(f"trainer.allow_unsafe_operations={trainer.config.trainer.allow_unsafe_operations}")
