"""A synthetic visual task for tests and examples: "what colour is the image?" over solid-colour images.

Every row has the same prompt text (``<image>What colour is the image?``) and one solid red or blue image, stored as
``{"bytes": <png>}`` as Hugging Face ``datasets`` writes images to parquet; ``reward_model.ground_truth`` is the colour
and ``data_source`` is ``synthetic_colour`` (scored by :mod:`verl.rewards.colour`). Since the text never
changes, a policy can only beat chance by reading the image.
"""

from __future__ import annotations

import io
import random
from typing import Any

__all__ = ["COLOURS", "DATA_SOURCE", "colour_rows", "write_colour_parquet"]

DATA_SOURCE = "synthetic_colour"
COLOURS = {"red": (220, 30, 30), "blue": (30, 30, 220)}
PROMPT = "<image>What colour is the image?"


def _png(rgb: tuple[int, int, int], size: tuple[int, int]) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, rgb).save(buf, format="PNG")
    return buf.getvalue()


def colour_rows(n: int, seed: int = 0, split: str = "train") -> list[dict[str, Any]]:
    """``n`` rows in verl's schema, colours alternating (so every batch of two or more has both), sizes random in
    28..64 pixels per side."""
    rng = random.Random(seed)
    names = sorted(COLOURS)
    rows = []
    for i in range(n):
        colour = names[i % len(names)]
        size = (rng.randint(28, 64), rng.randint(28, 64))
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": PROMPT}],
                "images": [{"bytes": _png(COLOURS[colour], size)}],
                "ability": "vision",
                "reward_model": {"style": "rule", "ground_truth": colour},
                "extra_info": {"split": split, "index": i},
            }
        )
    return rows


def write_colour_parquet(path: str, n: int, seed: int = 0, split: str = "train") -> str:
    """Write :func:`colour_rows` to a parquet file at ``path`` and return it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(colour_rows(n, seed, split)), path)
    return path
