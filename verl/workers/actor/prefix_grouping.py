"""``actor.use_prefix_grouper``: one forward of a group's shared prompt for all of its responses.

The responses of a GRPO group share one prompt. The plain forward runs ``[prompt, response_i]`` for each of the
``n`` rows, so the prompt's tokens pass through the model ``n`` times. Here the rows whose valid prompt tokens (and
prompt positions) are identical are packed into one sequence ``[prompt, response_1, ..., response_n]`` (valid
tokens only) and run with a 4-D attention mask in which

* a prompt token attends to the prompt tokens up to itself (causal), and
* a token of response ``i`` attends to the whole prompt and to the tokens of response ``i`` up to itself,

with each token keeping the position id it has in its own row. Every response token therefore sees exactly the
keys, values and positions it sees in the plain forward, so the log-probs, entropies and gradients are the same
(up to floating-point summation order); the prompt is computed once per group (upstream verl v0.9's PrefixGrouper,
``verl/trainer/ppo/prefix_grouper_utils.py``, which patches the attention functions instead).

Micro-batches hold whole groups (:func:`split_grouped_micro_batches`): a group larger than the micro-batch (rows,
or tokens with ``use_dynamic_bsz``, the prompt counted once) is cut into sub-groups, each of which still shares its
prompt. Sliding-window layers keep their window (on the rows' own positions). Needs a transformers model with
``eager`` or ``sdpa`` attention (custom 4-D masks), the padded, one row per sequence input (no
``use_remove_padding``), no Ulysses and no fused LM-head kernels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from tensordict import TensorDict

from verl.models.loader import forward_logits
from verl.utils.logprob_kernels import ChunkKernels
from verl.utils.prefix_grouper_checks import KEY, MASKED_ATTENTION
from verl.utils.seqlen_balancing import _sync_max, get_seqlen_balanced_partitions
from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits


def prompt_group_ids(micro: TensorDict) -> torch.Tensor:
    """Group index ``[bs]`` (0-based, in order of first appearance) of each row: rows with the same valid prompt
    tokens at the same positions share a group. The prompt is the first ``seqlen - response_len`` columns of
    ``input_ids``; pad columns (``attention_mask == 0``) are marked ``-1`` so only the valid tokens decide."""
    input_ids, mask = micro["input_ids"], micro["attention_mask"]
    prompt_len = input_ids.shape[1] - micro["responses"].shape[1]
    valid = mask[:, :prompt_len].bool()
    tokens = torch.where(valid, input_ids[:, :prompt_len], torch.full_like(input_ids[:, :prompt_len], -1))
    if "position_ids" in micro.keys() and micro["position_ids"].dim() == 2:
        positions = torch.where(valid, micro["position_ids"][:, :prompt_len], torch.full_like(tokens, -1))
        tokens = torch.cat([tokens, positions], dim=1)
    _, inverse = torch.unique(tokens.cpu(), dim=0, return_inverse=True)
    first: dict[int, int] = {}
    return torch.tensor([first.setdefault(int(g), len(first)) for g in inverse.tolist()], dtype=torch.long)


def _groups(micro: TensorDict) -> list[list[int]]:
    ids = prompt_group_ids(micro).tolist()
    groups: list[list[int]] = [[] for _ in range(max(ids) + 1 if ids else 0)]
    for row, g in enumerate(ids):
        groups[g].append(row)
    return groups


def _split_rows(rows: list[int]) -> list[list[int]]:
    half = (len(rows) + 1) // 2
    return [rows[:half], rows[half:]]


def _split_until(units: list[list[int]], count: int) -> list[list[int]]:
    """Cut the unit with the most rows in two until there are ``count`` units (rows-only units cannot be cut)."""
    units = [list(u) for u in units]
    while len(units) < count:
        biggest = max(range(len(units)), key=lambda i: len(units[i]))
        if len(units[biggest]) < 2:
            break
        units[biggest : biggest + 1] = _split_rows(units[biggest])
    return units


def _fixed_units(groups: list[list[int]], size: int) -> list[list[int]]:
    """Micro-batches of at most ``size`` rows made of whole groups; a group of more rows is cut into pieces."""
    pieces = [g[i : i + size] for g in groups for i in range(0, len(g), size)]
    bins: list[list[int]] = []
    for piece in pieces:
        if bins and len(bins[-1]) + len(piece) <= size:
            bins[-1].extend(piece)
        else:
            bins.append(list(piece))
    count = _sync_max(len(bins), None)
    return _split_until(bins, count) if count > len(bins) else bins


def _token_cost(rows: list[int], prompt_tokens: list[int], response_tokens: list[int]) -> int:
    """Tokens of a packed sub-group: its prompt once plus each response."""
    return prompt_tokens[rows[0]] + sum(response_tokens[r] for r in rows)


def _dynamic_units(
    groups: list[list[int]], max_token_len: int, prompt_tokens: list[int], response_tokens: list[int]
) -> list[list[int]]:
    """Micro-batches of whole (sub-)groups with at most ``max_token_len`` packed tokens each (the prompt counted
    once per group), balanced like :func:`verl.utils.seqlen_balancing.rearrange_micro_batches`; all ranks agree on
    the count."""
    units: list[list[int]] = []
    for g in groups:  # cut a group whose packed length is over the budget into sub-groups that fit
        current: list[int] = []
        for r in g:
            if current and _token_cost(current + [r], prompt_tokens, response_tokens) > max_token_len:
                units.append(current)
                current = []
            current.append(r)
        units.append(current)
    costs = [_token_cost(u, prompt_tokens, response_tokens) for u in units]
    k = max(1, math.ceil(sum(costs) / max_token_len))
    while True:
        k = _sync_max(k, None)
        if k > len(units):
            units = _split_until(units, k)
            costs = [_token_cost(u, prompt_tokens, response_tokens) for u in units]
            if k > len(units):
                raise ValueError(
                    f"dynamic batch size needs {k} micro-batches (token budget {max_token_len}) but this rank has only "
                    f"{len(units)} sequences; raise the max token length or the number of sequences per rank"
                )
        parts = get_seqlen_balanced_partitions([max(c, 1) for c in costs], k, equal_size=False)
        fits = all(len(p) == 1 or sum(costs[i] for i in p) <= max_token_len for p in parts)
        if _sync_max(0 if fits else 1, None) == 0:
            break
        k += 1
    parts.sort(key=lambda p: (-sum(costs[i] for i in p), min(units[i][0] for i in p)))
    return [[r for i in sorted(p, key=lambda i: units[i][0]) for r in units[i]] for p in parts]


def packed_lengths(batch: TensorDict) -> list[int]:
    """Tokens of each prompt group of ``batch`` packed as one row (the prompt once plus every response's valid
    tokens): the sequence lengths the grouped forward runs, for its model-FLOPs count."""
    mask = batch["attention_mask"]
    response_len = batch["responses"].shape[1]
    prompt_tokens = mask[:, :-response_len].sum(-1).tolist()
    response_tokens = mask[:, -response_len:].sum(-1).tolist()
    return [int(_token_cost(g, prompt_tokens, response_tokens)) for g in _groups(batch)]


def split_grouped_micro_batches(
    batch: TensorDict, micro_batch_size: int | None, use_dynamic_bsz: bool, max_token_len: int | None
) -> tuple[list[TensorDict], list[int]]:
    """Micro-batches of ``batch`` that keep each prompt group's rows together (see the module docstring).

    Fixed size: at most ``micro_batch_size`` rows each (a larger group is cut into pieces of that size). Dynamic:
    at most ``max_token_len`` tokens each, a group counting its prompt once and each response's valid tokens. Under
    torch.distributed the ranks agree on the number of micro-batches (FSDP collectives must line up); a rank with
    fewer groups cuts its largest into sub-groups. Returns ``(micro_batches, order)``: ``order`` is the input row of
    each concatenated micro-batch row (undo with :func:`~verl.workers.actor.micro_batching.restore_order`).
    """
    n = int(batch.batch_size[0])
    groups = _groups(batch)
    if use_dynamic_bsz:
        if max_token_len is None or int(max_token_len) <= 0:
            raise ValueError(f"use_dynamic_bsz needs a positive max_token_len, got {max_token_len!r}")
        mask = batch["attention_mask"]
        response_len = batch["responses"].shape[1]
        prompt_tokens = [int(x) for x in mask[:, :-response_len].sum(-1).tolist()]
        response_tokens = [int(x) for x in mask[:, -response_len:].sum(-1).tolist()]
        parts = _dynamic_units(groups, int(max_token_len), prompt_tokens, response_tokens)
    else:
        size = n if micro_batch_size is None else int(micro_batch_size)
        if size <= 0:
            raise ValueError(f"micro batch size must be a positive number of sequences, got {micro_batch_size!r}")
        parts = _fixed_units(groups, size)
    micro_batches = [batch[torch.tensor(p, dtype=torch.long)] for p in parts]
    return micro_batches, [r for p in parts for r in p]


@dataclass
class GroupedLayout:
    """A micro-batch packed one prompt group per row.

    ``input_ids``/``position_ids`` ``[G, L]`` (right-padded), ``allowed`` ``[G, L, L]`` (query may attend key),
    and for each scored response token: its packed row ``g``, the packed column ``src`` whose logits predict it, its
    label, and its place ``flat`` in the ``[bs * response_len]`` output.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    allowed: torch.Tensor
    g: torch.Tensor
    src: torch.Tensor
    labels: torch.Tensor
    flat: torch.Tensor


def build_grouped_layout(micro: TensorDict) -> GroupedLayout:
    """Pack the rows of ``micro`` (``input_ids``, ``attention_mask``, optional ``position_ids`` ``[bs, seqlen]``,
    ``responses`` ``[bs, response_len]``) into one sequence per prompt group: the group's valid prompt tokens, then
    each member's valid response tokens. Positions are the rows' own (``position_ids``, else the column index, as a
    transformers model uses without them). Response token ``j`` of a row is scored by the logits of the previous
    valid token of its own row (the prompt's last token for the first)."""
    input_ids = micro["input_ids"]
    device = input_ids.device
    mask = micro["attention_mask"].bool().cpu()
    bs, seqlen = input_ids.shape
    response_len = micro["responses"].shape[1]
    prompt_len = seqlen - response_len
    if "position_ids" in micro.keys():
        positions = micro["position_ids"]
        if positions.dim() != 2:
            raise ValueError(f"{KEY}=true needs 1-D position ids per row (no M-RoPE), got {tuple(positions.shape)}")
    else:
        positions = torch.arange(seqlen, device=device).expand(bs, seqlen)
    cols = torch.arange(seqlen)
    tok_rows, tok_cols, tok_seg = [], [], []  # per packed row: source row / column / segment of each token
    g_idx, src_idx, flat_idx, label_rows, label_cols = [], [], [], [], []
    for g, members in enumerate(_groups(micro)):
        prompt_cols = cols[:prompt_len][mask[members[0], :prompt_len]]
        rows, cs, seg = [torch.full_like(prompt_cols, members[0])], [prompt_cols], [torch.zeros_like(prompt_cols)]
        offset = prompt_cols.numel()
        for k, r in enumerate(members, start=1):
            resp_cols = cols[prompt_len:][mask[r, prompt_len:]]
            rows.append(torch.full_like(resp_cols, r))
            cs.append(resp_cols)
            seg.append(torch.full_like(resp_cols, k))
            # the token before each valid response token in packed order: the prompt's last, then its own row's
            prev = torch.arange(offset - 1, offset - 1 + resp_cols.numel())
            prev[:1] = prompt_cols.numel() - 1
            keep = prev >= 0  # no valid prompt token: the first response token has nothing to score it
            g_idx.append(torch.full((int(keep.sum()),), g, dtype=torch.long))
            src_idx.append(prev[keep])
            flat_idx.append(r * response_len + resp_cols[keep] - prompt_len)
            label_rows.append(torch.full((int(keep.sum()),), r, dtype=torch.long))
            label_cols.append(resp_cols[keep])
            offset += resp_cols.numel()
        tok_rows.append(torch.cat(rows))
        tok_cols.append(torch.cat(cs))
        tok_seg.append(torch.cat(seg))
    groups, length = len(tok_rows), max(t.numel() for t in tok_rows)
    pack_r = torch.zeros(groups, length, dtype=torch.long)
    pack_c = torch.zeros(groups, length, dtype=torch.long)
    segment = torch.full((groups, length), -1, dtype=torch.long)
    for g in range(groups):
        n_tok = tok_rows[g].numel()
        pack_r[g, :n_tok], pack_c[g, :n_tok], segment[g, :n_tok] = tok_rows[g], tok_cols[g], tok_seg[g]
    pack_r, pack_c, segment = pack_r.to(device), pack_c.to(device), segment.to(device)
    valid = segment >= 0
    q_seg, k_seg = segment[:, :, None], segment[:, None, :]
    causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    allowed = causal & (k_seg >= 0) & ((k_seg == 0) | (k_seg == q_seg))
    allowed |= torch.eye(length, dtype=torch.bool, device=device)  # a pad query sees itself (no all-masked row)
    label_r, label_c = torch.cat(label_rows).to(device), torch.cat(label_cols).to(device)
    return GroupedLayout(
        input_ids=torch.where(valid, input_ids[pack_r, pack_c], torch.zeros_like(pack_r)),
        position_ids=torch.where(valid, positions[pack_r, pack_c], torch.zeros_like(pack_r)),
        allowed=allowed,
        g=torch.cat(g_idx).to(device),
        src=torch.cat(src_idx).to(device),
        labels=input_ids[label_r, label_c],
        flat=torch.cat(flat_idx).to(device),
    )


def attention_implementation(module: torch.nn.Module) -> str | None:
    """The transformers attention implementation of ``module`` (None for a module without a transformers config)."""
    config = getattr(module, "config", None)
    impl = getattr(config, "_attn_implementation", None)
    return str(impl) if impl is not None else None


def attention_mask_4d(allowed: torch.Tensor, impl: str) -> torch.Tensor:
    """``[G, 1, L, L]`` mask for the model: boolean (True: attend) for ``sdpa``, additive float32 for ``eager``."""
    if impl == "sdpa":
        return allowed[:, None]
    blocked = torch.zeros(allowed.shape, dtype=torch.float32, device=allowed.device)
    return blocked.masked_fill(~allowed, torch.finfo(torch.float32).min)[:, None]


def sliding_window_of(module: torch.nn.Module) -> tuple[int | None, bool]:
    """``(window, per_layer)``: the sliding attention window of a transformers model (None without one), and whether
    only some layers slide (``config.layer_types`` naming ``sliding_attention``, e.g. Qwen2 with
    ``use_sliding_window``, Gemma) rather than all of them (Mistral)."""
    hf_config = getattr(module, "config", None)  # transformers' config object, not ours
    window = getattr(hf_config, "sliding_window", None)
    if not window or getattr(hf_config, "use_sliding_window", True) is False:
        return None, False
    layer_types = getattr(hf_config, "layer_types", None)
    if layer_types is not None:
        return (int(window), True) if "sliding_attention" in layer_types else (None, False)
    return int(window), False


def model_attention_mask(
    module: torch.nn.Module, layout: GroupedLayout, impl: str
) -> torch.Tensor | dict[str, torch.Tensor]:
    """The packed rows' attention mask as the model takes it: one 4-D mask, or with sliding-window layers the
    window applied as the plain forward applies it (a key at most ``window - 1`` positions back; the positions are
    the rows' own): one mask for a model whose layers all slide, ``{"full_attention", "sliding_attention"}`` for a
    model with both kinds (transformers takes such a mapping as it is)."""
    window, per_layer = sliding_window_of(module)
    full = attention_mask_4d(layout.allowed, impl)
    if window is None:
        return full
    pos = layout.position_ids
    sliding = attention_mask_4d(layout.allowed & ((pos[:, :, None] - pos[:, None, :]) < window), impl)
    return {"full_attention": full, "sliding_attention": sliding} if per_layer else sliding


def grouped_response_forward(
    module: torch.nn.Module,
    micro: TensorDict,
    temperature: float,
    calculate_entropy: bool,
    entropy_requires_grad: bool,
    calculate_sum_pi_squared: bool = False,
    entropy_chunk_size: int | None = None,
    kernels: ChunkKernels | None = None,
) -> tuple[torch.Tensor | None, ...]:
    """:func:`~verl.workers.actor.response_forward.response_logits_forward` with each prompt group's prompt run once.

    Returns ``(log_probs [bs, response_len], entropy [bs, response_len] | None)`` in float32 (plus ``sum_pi_squared``
    with ``calculate_sum_pi_squared``), in the rows' order; a response position whose ``attention_mask`` is 0 holds 0.
    ``log p(y_t) = log_softmax(logits_{t-1} / temperature)[y_t]``, the logits taken at the previous token of the
    same row in the packed sequence.
    """
    impl = attention_implementation(module)
    if impl not in MASKED_ATTENTION:
        raise ValueError(
            f"{KEY}=true needs a transformers model with attention_implementation in {MASKED_ATTENTION} (custom 4-D "
            f"masks), got {impl!r}; set actor_rollout_ref.model.attn_implementation=sdpa"
        )
    bs, response_len = micro["responses"].shape
    layout = build_grouped_layout(micro)
    length = layout.input_ids.shape[1]
    first = int(layout.src.min()) if layout.src.numel() else length - 1
    logits = forward_logits(
        module,
        layout.input_ids,
        model_attention_mask(module, layout, impl),
        layout.position_ids,
        logits_to_keep=length - first,
    )
    logits = logits[layout.g, layout.src - (length - logits.shape[1])]  # [N, vocab], the scoring positions only
    if temperature != 1.0:
        logits = logits / temperature

    def place(values: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(bs * response_len, dtype=torch.float32, device=values.device)
        return out.index_put((layout.flat,), values.float()).view(bs, response_len)

    log_probs = place(logprobs_from_logits(logits, layout.labels, kernels=kernels))
    entropy = None
    if calculate_entropy:
        if entropy_requires_grad:
            entropy = place(entropy_from_logits(logits, entropy_chunk_size, kernels))
        else:
            with torch.no_grad():
                entropy = place(entropy_from_logits(logits.detach(), entropy_chunk_size, kernels))
    if calculate_sum_pi_squared:
        with torch.no_grad():
            sq = place(torch.softmax(logits.detach().float(), dim=-1).square().sum(dim=-1))
        return log_probs, entropy, sq
    return log_probs, entropy
