"""Prompt dataset for RL (PPO/GRPO): parquet files in verl's schema -> left-padded prompt tensors.

Schema of a row (verl's): ``data_source`` (str), ``prompt`` (list of chat messages ``{"role", "content"}``),
``ability`` (str, optional), ``reward_model`` (``{"style", "ground_truth"}``), ``extra_info`` (dict, optional).
Vision-language rows add ``images`` (``data.image_key``): a list of images (bytes, paths, PIL images or
``{"bytes"|"image": ...}`` dicts, see :mod:`verl.data.vision_utils`) that the ``<image>`` placeholders of the
prompt's messages refer to, in order. Rows with videos add ``videos`` (``data.video_key``): a list of videos, each a
list of frames (any image form above), a directory of frame images, a video file path (decoded with OpenCV when it is
installed) or ``{"video": ..., "fps": ...}`` (see :mod:`verl.data.video_utils`), that the ``<video>``
placeholders refer to, in order.
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import torch

from verl.base_config import omega_conf_to_dataclass
from verl.data.bundled import resolve_data_path
from verl.data.config import DataConfig
from verl.data.multi_modal_inputs import processor_inputs
from verl.data.sampler import create_rl_sampler
from verl.data.sft_dataset import to_plain
from verl.data.video_utils import is_video_file, video_decoder
from verl.data.vision_utils import IMAGE_PLACEHOLDER, VIDEO_PLACEHOLDER

# create_rl_sampler lives in sampler.py; re-exported here because callers look for it next to the dataset.
__all__ = ["RLHFDataset", "collate_fn", "compute_position_ids", "create_rl_sampler"]

logger = logging.getLogger(__name__)

REQUIRED_COLUMNS = ("data_source", "reward_model")
TRUNCATION_MODES = ("error", "left", "right")


# (dataset, rows, origins, rows to skip) while RLHFDataset._tokenize_rows runs its forked workers
_FORK_STATE: tuple[Any, list[dict[str, Any]], list[tuple[str, int]], set[int]] | None = None


def _tokenize_chunk(bounds: tuple[int, int]) -> tuple[int, list[list[int]]]:
    """In a forked worker: ``(pid, token ids of rows[start:end])`` of the dataset being built (``_FORK_STATE``)."""
    assert _FORK_STATE is not None, "_tokenize_chunk runs only in a worker forked by RLHFDataset._tokenize_rows"
    dataset, rows, origins, skip = _FORK_STATE
    start, end = bounds
    ids = [[] if i in skip else dataset._tokenize(rows[i], origins[i]) for i in range(start, end)]
    return os.getpid(), ids


def compute_position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids of a left-padded sequence: ``clamp(cumsum(mask) - 1, min=0)``, same shape as the mask."""
    return torch.clamp(torch.cumsum(attention_mask, dim=-1) - 1, min=0)


def _object_array(values: Sequence[Any]) -> np.ndarray:
    """1-D numpy object array holding ``values`` as-is (np.array would turn equal-length lists into a 2-D array)."""
    arr = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        arr[i] = v
    return arr


def collate_fn(data_list: list[dict[str, Any]]) -> dict[str, Any]:
    """Batch dataset items: tensors are stacked (``[bs, ...]``), every other value becomes a numpy object array.

    The result feeds ``DataProto.from_single_dict``.
    """
    if not data_list:
        raise ValueError("collate_fn got an empty list of samples")
    keys = list(data_list[0].keys())
    out: dict[str, Any] = {}
    for key in keys:
        values = []
        for i, item in enumerate(data_list):
            if key not in item:
                raise ValueError(f"collate_fn: sample {i} lacks key {key!r} present in sample 0")
            values.append(item[key])
        if isinstance(values[0], torch.Tensor):
            out[key] = torch.stack(values, dim=0)
        else:
            out[key] = _object_array(values)
    return out


class RLHFDataset(torch.utils.data.Dataset):
    """Prompts from parquet files, tokenised with the chat template and left-padded to ``max_prompt_length``.

    Args:
        data_files: one parquet path or a list (local paths, ``~``, or ``bundled://<name>``).
        tokenizer: a Hugging Face tokenizer. Without a pad token, the EOS token is used for padding.
        config: the ``data`` config section (keys: ``prompt_key``, ``max_prompt_length``, ``return_raw_chat``,
            ``filter_overlong_prompts``, ``truncation``, ``apply_chat_template``, optional ``max_samples``: the first
            rows).
        max_samples: keep this many rows (-1: all), ``data.train_max_samples``: a random subset drawn with
            ``data.seed`` when ``data.shuffle``, else the first rows (upstream verl's rule).
        processor: the multi-modal processor of a vision-language model (``hf_processor``) or None. With one,
            rows with images (``data.image_key``) or videos (``data.video_key``) go through
            ``processor.apply_chat_template`` and ``processor`` (which expands each image's or video's placeholder
            to its patch count); keys ``image_key`` (``images``), ``video_key`` (``videos``),
            ``video_max_frames`` (16: longer videos keep that many evenly spaced frames),
            ``return_multi_modal_inputs`` (true), ``min_pixels`` / ``max_pixels`` (null: the processor's own
            limits; they apply to images and to each video frame) apply.

    ``__getitem__`` returns ``input_ids``, ``attention_mask``, ``position_ids`` (1-D ``[max_prompt_length]``,
    left-padded), ``raw_prompt_ids`` (list of ids, unpadded), ``raw_prompt`` (the messages, when
    ``return_raw_chat``), ``data_source``, ``reward_model``, ``extra_info``, ``ability`` and ``index``. With a
    processor, also ``multi_modal_data`` (``{"image": [PIL images], "video": [[PIL frames], ...]}``, keys present
    only when the row has them, what vLLM takes) and, with ``return_multi_modal_inputs``, ``multi_modal_inputs``
    (``{"pixel_values": [patches, dim], "image_grid_thw": [images, 3]}`` for images; ``{"pixel_values_videos":
    [video_patches, dim], "video_grid_thw": [videos, 3], "second_per_grid_ts": [videos]}`` for videos: what the
    model's forward takes); rows without either get ``{}`` for both. ``position_ids`` stay the 1-D text positions:
    the model's 3-D rotary positions are computed from the tokens and image/video grids at every forward
    (:func:`verl.models.vlm.vision_forward_kwargs`).
    """

    def __init__(
        self,
        data_files: str | Sequence[str],
        tokenizer: Any,
        config: DataConfig | Mapping[str, Any] | None,
        processor: Any = None,
        max_samples: int = -1,
    ) -> None:
        if isinstance(data_files, str):
            data_files = [data_files]
        else:
            data_files = list(data_files)
        if not data_files:
            raise ValueError("RLHFDataset: data_files is empty")
        self.data_files = [resolve_data_path(str(f)) for f in data_files]
        self.tokenizer = tokenizer
        # typed: a partial data section (the Python API, tests) is completed from DataConfig, the defaults' one home
        self.config = config = omega_conf_to_dataclass(config, DataConfig)
        self.prompt_key: str = config.prompt_key
        self.max_prompt_length: int = config.max_prompt_length
        self.return_raw_chat: bool = config.return_raw_chat
        self.filter_overlong_prompts: bool = config.filter_overlong_prompts
        self.truncation: str = config.truncation
        self.apply_chat_template: bool = config.apply_chat_template
        self.chat_template_kwargs: dict[str, Any] = dict(config.apply_chat_template_kwargs or {})
        self.filter_workers: int = config.filter_overlong_prompts_workers
        self.processor = processor
        self.image_key: str = config.image_key
        self.video_key: str = config.video_key
        self.video_max_frames: int = config.video_max_frames
        self.return_multi_modal_inputs: bool = config.return_multi_modal_inputs
        self.min_pixels: int | None = config.min_pixels
        self.max_pixels: int | None = config.max_pixels
        eval_cap = config.get("max_samples")  # not a data key: main_eval's cap (absent: every row)
        self.max_samples: int = -1 if eval_cap is None else int(eval_cap)
        if self.max_prompt_length <= 0:
            raise ValueError(f"data.max_prompt_length must be > 0, got {self.max_prompt_length}")
        if self.video_max_frames < 1:
            raise ValueError(f"data.video_max_frames must be >= 1, got {self.video_max_frames}")
        if self.filter_workers < 1:
            raise ValueError(f"data.filter_overlong_prompts_workers must be >= 1, got {self.filter_workers}")
        if self.truncation not in TRUNCATION_MODES:
            raise ValueError(f"data.truncation must be one of {list(TRUNCATION_MODES)}, got {self.truncation!r}")

        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if self.pad_token_id is None:
            raise ValueError("RLHFDataset: the tokenizer has neither a pad token nor an EOS token to pad with")
        self.use_chat_template = self.apply_chat_template and bool(getattr(tokenizer, "chat_template", None))

        rows: list[dict[str, Any]] = []
        origins: list[tuple[str, int]] = []
        for path in self.data_files:
            file_rows = self._read_file(path)
            rows.extend(file_rows)
            origins.extend((path, i) for i in range(len(file_rows)))
        if 0 < self.max_samples < len(rows):
            rows, origins = rows[: self.max_samples], origins[: self.max_samples]
        if 0 < int(max_samples) < len(rows):
            # data.train_max_samples (upstream's rule): a subset drawn with data.seed when the data is shuffled,
            # else the first rows; kept in file order (the sampler shuffles)
            if config.shuffle:
                keep = np.sort(np.random.default_rng(int(config.seed)).choice(len(rows), int(max_samples), False))
            else:
                keep = np.arange(int(max_samples))
            rows, origins = [rows[i] for i in keep], [origins[i] for i in keep]

        # Rows certainly over the limit are found from their character count alone and never tokenised: a 20 MB
        # prompt would otherwise cost gigabytes of token lists before the length filter drops it.
        over = self._certainly_overlong(rows) if self.filter_overlong_prompts or self.truncation == "error" else set()
        if over and not self.filter_overlong_prompts:
            self._raise_overlong([(origins[i], None) for i in sorted(over)])
        # Tokenise once up front: filtering needs the lengths, and it surfaces template errors at load time.
        token_ids = self._tokenize_rows(rows, origins, over)
        positions = list(range(len(rows)))
        self.num_filtered = 0
        if not self.filter_overlong_prompts and self.truncation == "error":
            # found now, not at the step that first draws the row
            too_long = [(origins[i], len(ids)) for i, ids in enumerate(token_ids) if len(ids) > self.max_prompt_length]
            if too_long:
                self._raise_overlong(too_long)
        if self.filter_overlong_prompts:
            keep = [i for i, ids in enumerate(token_ids) if i not in over and len(ids) <= self.max_prompt_length]
            self.num_filtered = len(rows) - len(keep)
            if self.num_filtered:
                logger.warning(
                    "RLHFDataset: filtered %d of %d prompts longer than max_prompt_length=%d",
                    self.num_filtered,
                    len(rows),
                    self.max_prompt_length,
                )
            rows = [rows[i] for i in keep]
            origins = [origins[i] for i in keep]
            token_ids = [token_ids[i] for i in keep]
            positions = [positions[i] for i in keep]
        self._rows = rows
        self._origins = origins
        self._token_ids = token_ids
        # Position of each kept row in the concatenated files, the fallback ``index`` when extra_info has none.
        self._global_index = positions

    # ------------------------------------------------------------------ loading and validation
    def _max_chars_per_token(self) -> int:
        """The longest vocabulary entry in characters: no token covers more characters of the text than that."""
        try:
            vocab = self.tokenizer.get_vocab()
        except (AttributeError, NotImplementedError):
            return 0
        return max((len(t) for t in vocab), default=0)

    def _certainly_overlong(self, rows: list[dict[str, Any]]) -> set[int]:
        """Indices of rows whose message text alone needs more than ``max_prompt_length`` tokens.

        A token stands for at most ``max_chars_per_token`` characters (byte-level and sentencepiece vocabularies
        spell each token with at least as many characters as it decodes to), so ``chars / max_chars_per_token``
        is a lower bound of the token count; the chat template only adds tokens.
        """
        per_token = self._max_chars_per_token()
        if per_token <= 0:
            return set()
        limit_chars = self.max_prompt_length * per_token
        over = set()
        for i, row in enumerate(rows):
            messages = row.get(self.prompt_key)
            if isinstance(messages, list):
                chars = sum(
                    len(m["content"]) for m in messages if isinstance(m, dict) and isinstance(m.get("content"), str)
                )
                if chars > limit_chars:
                    over.add(i)
        return over

    def _raise_overlong(self, rows: list[tuple[tuple[str, int], int | None]]) -> None:
        shown = "; ".join(
            f"{path} row {row}: " + (f"{n} tokens" if n is not None else "far over the limit (not tokenised)")
            for (path, row), n in rows[:5]
        )
        more = f" (and {len(rows) - 5} more)" if len(rows) > 5 else ""
        raise ValueError(
            f"RLHFDataset: {len(rows)} prompts are longer than data.max_prompt_length={self.max_prompt_length} "
            f"with data.truncation=error and data.filter_overlong_prompts=false: {shown}{more}; set "
            "data.filter_overlong_prompts=true, data.truncation=left|right or a larger data.max_prompt_length"
        )

    def _read_file(self, path: str) -> list[dict[str, Any]]:
        import pyarrow.parquet as pq

        if not os.path.isfile(path):
            raise ValueError(f"RLHFDataset: data file {path} does not exist")
        try:
            table = pq.read_table(path)
        except Exception as e:
            raise ValueError(f"RLHFDataset: cannot read parquet file {path}: {type(e).__name__}: {e}") from e
        if table.num_rows == 0:
            raise ValueError(f"RLHFDataset: data file {path} has no rows")
        columns = set(table.column_names)
        for col in (self.prompt_key, *REQUIRED_COLUMNS):
            if col not in columns:
                raise ValueError(f"RLHFDataset: data file {path} has no column {col!r} (columns: {sorted(columns)})")
        rows = [to_plain(r) for r in table.to_pylist()]
        for i, row in enumerate(rows):
            self._validate_row(row, path, i)
        return rows

    def _validate_row(self, row: dict[str, Any], path: str, i: int) -> None:
        where = f"RLHFDataset: {path} row {i}"
        messages = row.get(self.prompt_key)
        if not isinstance(messages, list) or not messages:
            raise ValueError(
                f"{where} column {self.prompt_key!r}: expected a non-empty list of chat messages "
                f"{{'role', 'content'}}, got {type(messages).__name__}: {messages!r:.200}"
            )
        for j, msg in enumerate(messages):
            if (
                not isinstance(msg, dict)
                or not isinstance(msg.get("role"), str)
                or not isinstance(msg.get("content"), str)
            ):
                raise ValueError(
                    f"{where} column {self.prompt_key!r}: message {j} must be a dict with string 'role' and "
                    f"'content', got {msg!r:.200}"
                )
        if not isinstance(row.get("data_source"), str):
            raise ValueError(f"{where} column 'data_source': expected a string, got {row.get('data_source')!r}")
        rm = row.get("reward_model")
        if not isinstance(rm, dict) or rm.get("ground_truth") is None:
            raise ValueError(
                f"{where} column 'reward_model': expected a dict with key 'ground_truth' (and 'style'), got {rm!r}"
            )
        extra = row.get("extra_info")
        if extra is not None and not isinstance(extra, dict):
            raise ValueError(f"{where} column 'extra_info': expected a dict or null, got {type(extra).__name__}")
        ability = row.get("ability")
        if ability is not None and not isinstance(ability, str):
            raise ValueError(f"{where} column 'ability': expected a string or null, got {ability!r}")
        for key, kind, tag in (
            (self.image_key, "images", IMAGE_PLACEHOLDER),
            (self.video_key, "videos", VIDEO_PLACEHOLDER),
        ):
            self._validate_media(row, messages, key, kind, tag, where)

    def _validate_media(
        self, row: dict[str, Any], messages: list[dict[str, str]], key: str, kind: str, tag: str, where: str
    ) -> None:
        """Column ``key`` of ``row`` holds a list of ``kind`` (images or videos) matching the ``tag`` placeholders."""
        media = row.get(key)
        if media is None or (isinstance(media, list) and not media):
            return
        if not isinstance(media, list):
            raise ValueError(f"{where} column {key!r}: expected a list of {kind}, got {type(media).__name__}")
        if self.processor is None:
            raise ValueError(
                f"{where} has {len(media)} {kind} in column {key!r} but no processor was given: the model "
                "at actor_rollout_ref.model.path has no multi-modal processor (is it a vision-language model?)"
            )
        placeholders = sum(m["content"].count(tag) for m in messages)
        if placeholders != len(media):
            raise ValueError(
                f"{where}: the prompt has {placeholders} {tag} placeholders but column {key!r} holds {len(media)} "
                f"{kind}; each {kind[:-1]} needs one placeholder, in order"
            )
        if kind == "videos" and video_decoder() is None:
            for k, video in enumerate(media):
                source = video.get("video") if isinstance(video, dict) else video
                if is_video_file(source) and not os.path.isdir(str(source)):
                    raise ValueError(
                        f"{where} column {key!r} video {k}: video file {str(source)!r} needs a video decoder and "
                        "none is installed (OpenCV: pip install opencv-python-headless); store the video as a list "
                        "of frames or a directory of frame images instead"
                    )

    def _prompt_text(self, messages: list[dict[str, str]]) -> str:
        if self.use_chat_template:
            return self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False, **self.chat_template_kwargs
            )
        # No template: the raw message contents, one per line.
        return "\n".join(m["content"] for m in messages)

    def _has_vision(self, row: dict[str, Any]) -> bool:
        return self.processor is not None and bool(row.get(self.image_key) or row.get(self.video_key))

    def _process_multi_modal(
        self, row: dict[str, Any], origin: tuple[str, int]
    ) -> tuple[list[int], dict[str, torch.Tensor], dict[str, list[Any]], list[int]]:
        """A row with images/videos -> ``(prompt ids, multi_modal_inputs, multi_modal_data, raw ids)`` through the
        processor: the placeholders become image/video content parts of the chat template, the processor expands
        each image/video block to its merged patch count; the raw ids keep one placeholder token per image or video
        (what vLLM expands itself, as upstream's ``raw_prompt_ids``)."""
        where = f"RLHFDataset: {origin[0]} row {origin[1]}"
        ids, mm_inputs, media, text = processor_inputs(
            self.processor,
            row[self.prompt_key],
            row.get(self.image_key),
            where,
            self.min_pixels,
            self.max_pixels,
            videos=row.get(self.video_key),
            video_max_frames=self.video_max_frames,
            template_kwargs=self.chat_template_kwargs,
        )
        raw_ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return ids, mm_inputs, media, raw_ids

    def _tokenize_rows(
        self, rows: list[dict[str, Any]], origins: list[tuple[str, int]], skip: set[int]
    ) -> list[list[int]]:
        """Token ids of every row (``[]`` for the rows in ``skip``), in order.

        With ``data.filter_overlong_prompts_workers`` N > 1 (verl's key: the processes of its length filter) the rows
        are split into N contiguous chunks tokenised by N forked processes (the chat template is Python, so threads
        would not run it in parallel); the ids are the same as with one process. Fewer rows than workers, or a
        platform without ``fork``, tokenise in this process.
        """
        n = min(self.filter_workers, len(rows))
        if n <= 1 or "fork" not in mp.get_all_start_methods():
            self.filter_pids = [os.getpid()]
            return [[] if i in skip else self._tokenize(rows[i], origins[i]) for i in range(len(rows))]
        global _FORK_STATE
        bounds = [(len(rows) * k // n, len(rows) * (k + 1) // n) for k in range(n)]
        _FORK_STATE = (self, rows, origins, skip)  # read by the forked children, never pickled
        try:
            with ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("fork")) as pool:
                chunks = list(pool.map(_tokenize_chunk, bounds))
        finally:
            _FORK_STATE = None
        self.filter_pids = sorted({pid for pid, _ in chunks})
        return [ids for _, part in chunks for ids in part]

    def _tokenize(self, row: dict[str, Any], origin: tuple[str, int]) -> list[int]:
        if self._has_vision(row):
            return self._process_multi_modal(row, origin)[0]
        messages = row[self.prompt_key]
        try:
            text = self._prompt_text(messages)
        except Exception as e:
            raise ValueError(f"RLHFDataset: {origin[0]} row {origin[1]}: applying the chat template failed: {e}") from e
        # The chat template already carries any BOS it wants; raw text gets the tokenizer's special tokens.
        ids = self.tokenizer(text, add_special_tokens=not self.use_chat_template)["input_ids"]
        return list(ids)

    # ------------------------------------------------------------------ dataset protocol
    def __len__(self) -> int:
        return len(self._rows)

    def _truncate(self, ids: list[int], item: int) -> list[int]:
        limit = self.max_prompt_length
        if len(ids) <= limit:
            return ids
        if self.truncation == "left":
            return ids[-limit:]
        if self.truncation == "right":
            return ids[:limit]
        path, row = self._origins[item]
        raise ValueError(
            f"RLHFDataset: {path} row {row}: prompt is {len(ids)} tokens, longer than data.max_prompt_length="
            f"{limit}; set data.filter_overlong_prompts=true or data.truncation=left|right"
        )

    def __getitem__(self, item: int) -> dict[str, Any]:
        """Return one left-padded prompt and its metadata (see the class docstring)."""
        row = self._rows[item]
        multi_modal: dict[str, Any] | None = None
        ids = self._token_ids[item]
        raw_ids: list[int] | None = None
        if self._has_vision(row):
            ids, mm_inputs, media, raw_ids = self._process_multi_modal(row, self._origins[item])
            if len(ids) > self.max_prompt_length:  # cutting through an image's tokens would orphan its patches
                path, row_no = self._origins[item]
                raise ValueError(
                    f"RLHFDataset: {path} row {row_no}: prompt with images/videos is {len(ids)} tokens, longer than "
                    f"data.max_prompt_length={self.max_prompt_length}; such prompts are never truncated: set "
                    "data.filter_overlong_prompts=true, a larger data.max_prompt_length, a smaller data.max_pixels or "
                    "fewer data.video_max_frames"
                )
            multi_modal = {"multi_modal_data": media}
            if self.return_multi_modal_inputs:
                multi_modal["multi_modal_inputs"] = mm_inputs
        elif self.processor is not None:
            multi_modal = {"multi_modal_data": {}}
            if self.return_multi_modal_inputs:
                multi_modal["multi_modal_inputs"] = {}
        ids = self._truncate(ids, item)
        pad = self.max_prompt_length - len(ids)
        input_ids = torch.tensor([self.pad_token_id] * pad + ids, dtype=torch.long)
        attention_mask = torch.tensor([0] * pad + [1] * len(ids), dtype=torch.long)
        extra_info = row.get("extra_info") or {}
        index = extra_info.get("index")
        if index is None or (isinstance(index, float) and math.isnan(index)):
            index = self._global_index[item]
        out: dict[str, Any] = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": compute_position_ids(attention_mask),
            "raw_prompt_ids": list(ids) if raw_ids is None else raw_ids,
            "data_source": row["data_source"],
            "reward_model": row["reward_model"],
            "extra_info": extra_info,
            "ability": row.get("ability"),
            "index": index,
        }
        if self.return_raw_chat:
            out["raw_prompt"] = row[self.prompt_key]
        if multi_modal is not None:
            out.update(multi_modal)
        if "agent_name" in row:  # the agent loop of a multi-turn rollout (rollout.agent.default_agent_loop if null)
            out["agent_name"] = row["agent_name"]
        return out

    def data_sources(self, key: str = "data_source") -> dict[str, tuple[str, int]]:
        """Each distinct value of column ``key`` with the (file, row) where it first appears."""
        found: dict[str, tuple[str, int]] = {}
        for row, origin in zip(self._rows, self._origins):
            found.setdefault(str(row.get(key)), origin)
        return found

    def origin(self, item: int) -> tuple[str, int]:
        """Return ``(file, row)`` that dataset item ``item`` was read from (for error messages)."""
        return self._origins[item]
