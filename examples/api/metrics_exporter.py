"""Document 000, section 5.3: Prometheus metrics via MetricsExporter.

The document pushes to a Pushgateway; with no network here the exporter serves /metrics on a local port instead
(pass pushgateway_url=... to push).

    python examples/api/metrics_exporter.py [--tiny]
"""

import urllib.request

from _common import done, fast_config, model_path, parse_args
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl import ActorModel, PPOTrainer
from verl.metrics import MetricsExporter

args = parse_args(__doc__)
path = model_path(args.tiny, args.output_dir)
trainer = PPOTrainer(
    actor_model=ActorModel(AutoModelForCausalLM.from_pretrained(path)),
    tokenizer=AutoTokenizer.from_pretrained(path),
    reward_fn="length",
    config={"batch_size": 2, "num_samples": 2, "trainer.default_local_dir": args.output_dir, **fast_config(args.tiny)},
)
exporter = MetricsExporter(job_name="verl-ppo-training")
port = exporter.serve(port=0)
trainer.add_metrics_exporter(exporter)
trainer.step(["hello", "world"])
text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
lines = [line for line in text.splitlines() if line.startswith("verl_")]
print("\n".join(lines[:8]))
trainer.close()
done(f"{len(lines)} verl_* samples served on port {port}")
