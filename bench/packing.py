"""The actor's GRPO step with padded micro-batches against packed ones (``actor_rollout_ref.model.use_remove_padding``).

A GRPO batch's responses end at different lengths, so the padded rows compute many pad tokens. ``use_remove_padding``
(null, the default, packs wherever the packed forward equals the padded one: ``verl/utils/fsdp_utils.py``) packs the
valid tokens of each micro-batch into rows as wide as its longest sequence (``sdpa``/``eager`` attention) or into
one row (flash-attention's varlen kernels): ``verl/utils/padding.py``.

On a random Qwen2.5-shaped model (``bench/decode_speed.py``'s shapes, the product's attention for the device:
eager on CPU, sdpa on a GPU) and a batch of ``--rows`` sequences whose prompts have ``--prompt-length / 2`` to
``--prompt-length`` tokens and whose responses have ``--response-length / 8`` to ``--response-length`` tokens
(uniform, seeded), this times, alternating the sides ``--repeats`` times in one process:

- the actor side of a GRPO step (the old-log-prob pass and the update, ``DataParallelPPOActor``) with
  ``use_remove_padding=false`` and ``true`` (rows here), the same data, model, optimizer and micro-batches;
- one micro-batch's forward and backward through each layout (padded, one row, rows): why one row is not the
  default under sdpa/eager attention (its attention is one block-masked square of all the tokens).

The log-probs of the three layouts are compared as well (largest difference). ``--sft`` adds the SFT trainer's
loss (``verl.trainer.offline.SFTTrainer``, ``model.use_remove_padding``) over one step's micro-batches of random
rows of the same lengths: the LM head at every position (the trainer before it scored the loss tokens only), the
padded rows and the packed ones, forward and backward.

    python bench/packing.py --smoke
    python bench/packing.py --shape S --rows 16 --micro-batch 8 --prompt-length 128 --response-length 512 --sft
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from bench._common import default_device, markdown_table, save_result  # noqa: E402
from bench.decode_speed import SHAPES, build_model  # noqa: E402


def make_batch(rows: int, prompt: int, response: int, vocab: int, device: str, seed: int = 0):
    """A GRPO-shaped ``DataProto``: left-padded prompts of ``prompt/2..prompt`` tokens, right-padded responses of
    ``response/8..response`` tokens, random ids, advantages and old log-probs."""
    from verl.protocol import DataProto

    gen = torch.Generator().manual_seed(seed)
    prompt_lens = torch.randint(max(prompt // 2, 1), prompt + 1, (rows,), generator=gen)
    resp_lens = torch.randint(max(response // 8, 1), response + 1, (rows,), generator=gen)
    cols = torch.arange(prompt + response)
    mask = ((cols >= prompt - prompt_lens[:, None]) & (cols < prompt + resp_lens[:, None])).long()
    ids = torch.randint(0, vocab, (rows, prompt + response), generator=gen) * mask
    tensors = {
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
        "responses": ids[:, prompt:],
        "response_mask": mask[:, prompt:],
        "old_log_probs": torch.full((rows, response), -5.0),
        "advantages": torch.randn(rows, response, generator=gen),
    }
    meta = {"global_steps": 1, "temperature": 1.0}
    return DataProto.from_dict(tensors={k: v.to(device) for k, v in tensors.items()}, meta_info=meta)


def actor_config(rows: int, micro: int, dtype: torch.dtype):
    """The actor section of ``ppo_trainer.yaml`` with one mini-batch of ``rows`` in micro-batches of ``micro``."""
    from omegaconf import OmegaConf

    import verl.trainer.config.experiment_name  # noqa: F401  (registers the YAML's resolver)

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "verl/trainer/config")
    cfg = OmegaConf.load(os.path.join(path, "ppo_trainer.yaml"))
    OmegaConf.resolve(cfg)
    actor = cfg.actor_rollout_ref.actor
    actor.dtype = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]
    actor.ppo_mini_batch_size = rows
    actor.ppo_micro_batch_size_per_gpu = micro
    return actor


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_steps(model, data, args, device: str, dtype: torch.dtype) -> dict[str, list[float]]:
    """Seconds of the actor side of a GRPO step (old log-probs + update), padded and packed, alternated."""
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-7)
    config = actor_config(args.rows, args.micro_batch, dtype)
    actors = {
        side: DataParallelPPOActor(config, model, optimizer, use_remove_padding=side == "packed")
        for side in ("padded", "packed")
    }
    data.meta_info["micro_batch_size"] = args.micro_batch
    times: dict[str, list[float]] = {side: [] for side in actors}
    for repeat in range(args.repeats + 1):  # the first round warms up (allocator, kernels, optimizer state)
        for side, actor in actors.items():
            _sync(device)
            start = time.perf_counter()
            actor.compute_log_prob(data)
            actor.update_policy(data)
            _sync(device)
            if repeat:
                times[side].append(time.perf_counter() - start)
    return times


# micro-batch layouts: (use_remove_padding, pack_rows)
LAYOUTS = {"padded": (False, None), "one row": (True, False), "rows": (True, True)}


def time_layouts(model, data, args, device: str, dtype: torch.dtype) -> tuple[dict, dict]:
    """Seconds of one micro-batch's forward and backward per layout (``args.layouts``), and each layout's largest
    log-prob difference from the first one's."""
    from tensordict import TensorDict

    from verl.workers.actor.response_forward import response_logits_forward

    batch = data.batch[: args.micro_batch]
    micro = TensorDict({k: batch[k] for k in ("input_ids", "attention_mask", "position_ids", "responses")},
                       batch_size=[args.micro_batch])  # fmt: skip
    valid = batch["response_mask"].bool()
    layouts = {name: LAYOUTS[name] for name in args.layouts}
    times: dict[str, list[float]] = {name: [] for name in layouts}
    log_probs: dict[str, torch.Tensor] = {}
    for repeat in range(args.repeats + 1):
        for name, (rmpad, rows) in layouts.items():
            model.zero_grad(set_to_none=True)
            _sync(device)
            start = time.perf_counter()
            with torch.autocast(device, dtype=dtype, enabled=dtype != torch.float32):
                lp, _ = response_logits_forward(model, micro, 1.0, False, False, rmpad, pack_rows=rows)
            lp[valid].sum().backward()
            _sync(device)
            if repeat:
                times[name].append(time.perf_counter() - start)
            log_probs[name] = lp.detach()[valid].float()
    first = log_probs[args.layouts[0]]
    diffs = {name: float((lp - first).abs().max()) for name, lp in log_probs.items()}
    return times, diffs


def sft_rows(rows: int, prompt: int, response: int, seed: int = 0) -> list[dict[str, str]]:
    """SFT rows of random letters (one byte-tokenizer token each): prompts of ``prompt/2..prompt`` characters,
    responses of ``response/8..response``."""
    gen = torch.Generator().manual_seed(seed)

    def text(lo: int, hi: int) -> str:
        n = int(torch.randint(lo, hi + 1, (1,), generator=gen))
        return "".join(chr(97 + int(c)) for c in torch.randint(0, 26, (n,), generator=gen))

    return [{"prompt": text(max(prompt // 2, 1), prompt), "response": text(max(response // 8, 1), response)}
            for _ in range(rows)]  # fmt: skip


def time_sft(model, args, device: str, dtype: torch.dtype) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Seconds of the SFT loss's forward and backward over the micro-batches of one step: the logits at every
    position (the SFT trainer before the LM head ran at the loss tokens only), padded, packed; and each side's
    loss."""
    from verl.models.loader import forward_logits
    from verl.models.tiny import make_byte_tokenizer
    from verl.trainer.offline import SFTTrainer
    from verl.trainer.offline.sft import sft_loss

    tokenizer = make_byte_tokenizer()
    config = {"model.dtype": str(dtype).replace("torch.", ""), "trainer.logger": ["file"], "trainer.device": device}
    rows = sft_rows(args.rows, args.prompt_length, args.response_length)
    length = args.prompt_length + args.response_length + 16  # the chat template's few tokens
    trainers = {
        side: SFTTrainer(
            model=model,
            tokenizer=tokenizer,
            dataset=rows,
            max_length=length,
            config={**config, "model.use_remove_padding": side == "packed"},
        )  # fmt: skip
        for side in ("padded", "packed")
    }
    ds = trainers["padded"].train_dataset
    micro = [trainers["padded"]._collate([ds[j] for j in range(i, min(i + args.micro_batch, len(ds)))], ds)
             for i in range(0, len(ds), args.micro_batch)]  # fmt: skip

    def all_logits(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        with torch.autocast(device, dtype=dtype, enabled=dtype != torch.float32):
            logits = forward_logits(model, batch["input_ids"], batch["attention_mask"], batch["position_ids"])
        return sft_loss(logits, batch["input_ids"], batch["loss_mask"], reduction="sum")

    sides = {"all logits": all_logits, **{s: (lambda b, t=t: t._compute_loss(b).loss_sum) for s, t in trainers.items()}}
    times: dict[str, list[float]] = {side: [] for side in sides}
    losses: dict[str, float] = {}
    for repeat in range(args.repeats + 1):
        for side, loss_of in sides.items():
            model.zero_grad(set_to_none=True)
            _sync(device)
            start = time.perf_counter()
            total = 0.0
            for batch in micro:
                loss = loss_of({k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()})
                loss.backward()
                total += float(loss.detach())
            _sync(device)
            if repeat:
                times[side].append(time.perf_counter() - start)
            losses[side] = total
    return times, losses


def main(argv: list[str] | None = None) -> None:
    from verl.hardware.precision import resolve_dtype
    from verl.models.loader import resolve_attn_implementation
    from verl.utils.padding import pack_padded_batch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="S", choices=sorted(SHAPES))
    parser.add_argument("--rows", type=int, default=16, help="sequences per step (one mini-batch)")
    parser.add_argument("--micro-batch", type=int, default=8, help="sequences per forward/backward")
    parser.add_argument("--prompt-length", type=int, default=128)
    parser.add_argument("--response-length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds after one warm-up round")
    parser.add_argument(
        "--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS),
        help="micro-batch layouts to time (one row under eager attention holds a [tokens, tokens] square per head)",
    )  # fmt: skip
    parser.add_argument("--attn", default="auto", help="attention implementation (auto: eager on CPU, else sdpa)")
    parser.add_argument("--dtype", default="auto", help="auto: bf16 where the device computes it fast, else fp32")
    parser.add_argument("--device", default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--sft", action="store_true", help="also the SFT trainer's loss: all logits, padded, packed")
    parser.add_argument("--smoke", action="store_true", help="tiny shape, 4 rows of 16 + 32 tokens, one round")
    args = parser.parse_args(argv)
    if args.smoke:
        args.shape, args.rows, args.micro_batch, args.prompt_length, args.response_length = "tiny", 4, 2, 16, 32
        args.repeats, args.sft = 1, True
    device = args.device or default_device()
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = resolve_dtype(args.dtype, torch.device(device))
    attn = resolve_attn_implementation(args.attn, device)
    model = build_model(args.shape, device).train()
    model.set_attn_implementation(attn)
    data = make_batch(args.rows, args.prompt_length, args.response_length, model.config.vocab_size, device)
    mask = data.batch["attention_mask"]
    micro_masks = mask.split(args.micro_batch)
    tokens = {
        "valid": int(mask.sum()),
        "padded": int(mask.numel()),
        "rows": sum(pack_padded_batch(m, m, into_rows=True).input_ids.numel() for m in micro_masks),
    }
    print(f"{args.shape}, {attn} attention, {dtype}, {torch.get_num_threads()} threads, tokens {tokens}", flush=True)
    steps = time_steps(model, data, args, device, dtype)
    layouts, diffs = time_layouts(model, data, args, device, dtype)
    best = {side: min(t) for side, t in steps.items()}
    ratio = best["packed"] / best["padded"]
    rounds = {side: " ".join(f"{t:.2f}" for t in times) for side, times in steps.items()}
    print(markdown_table(["actor step", "seconds (best)", "all rounds"], [[s, best[s], rounds[s]] for s in steps]))
    print(f"packed / padded: {ratio:.3f}")
    print(markdown_table(["micro-batch layout", "fwd+bwd seconds (best)", f"max |diff| log-probs vs {args.layouts[0]}"],
                         [[name, min(t), diffs[name]] for name, t in layouts.items()]))  # fmt: skip
    sft = None
    if args.sft:
        sft_times, sft_losses = time_sft(model, args, device, dtype)
        sft = {"seconds": sft_times, "loss_sum": sft_losses}
        print(markdown_table(["SFT loss, one step's micro-batches", "fwd+bwd seconds (best)", "summed loss"],
                             [[side, min(t), sft_losses[side]] for side, t in sft_times.items()]))  # fmt: skip
    payload = {
        "shape": args.shape, "attn": attn, "dtype": str(dtype), "device": device, "threads": torch.get_num_threads(),
        "tokens": tokens, "step_seconds": steps, "packed_over_padded": ratio,
        "layout_seconds": layouts, "layout_max_abs_diff": diffs, "sft": sft, "args": vars(args),
    }  # fmt: skip
    print("saved", save_result(f"packing_{args.shape}", payload, smoke=args.smoke, per_machine=True))


if __name__ == "__main__":
    main()
