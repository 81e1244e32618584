"""Small helpers. ``from verl.utils import hf_tokenizer, hf_processor, omega_conf_to_dataclass`` works as in verl
(loaded on first use).

The larger parts that verl keeps here live in packages of their own; their ``verl.utils.*`` paths stay importable
as the same module objects (:mod:`verl.utils._moved`): ``verl.utils.checkpoint`` is :mod:`verl.checkpoint`,
``verl.utils.dataset`` :mod:`verl.data`, ``verl.utils.reward_score`` :mod:`verl.rewards`, ``verl.utils.tracking``
and ``verl.utils.metric`` :mod:`verl.reporting`, ``verl.utils.sandbox`` :mod:`verl.sandbox`, ``verl.utils.models``
:mod:`verl.models`, ``verl.utils.hardware``, ``profiler`` and ``flops_counter`` :mod:`verl.hardware`; the
documents' ``verl.utils.evaluation`` is :mod:`verl.api.evaluation`.
"""

import importlib
from typing import Any

from verl.utils import _moved

_moved.install()


def __getattr__(name: str) -> Any:
    if name in ("hf_tokenizer", "hf_processor"):
        from verl.utils import tokenizer

        return getattr(tokenizer, name)
    if name == "omega_conf_to_dataclass":
        from verl.utils.config import omega_conf_to_dataclass

        return omega_conf_to_dataclass
    if (
        f"{__name__}.{name}" in _moved.MOVED or f"{__name__}.{name}" in _moved.ALIASES
    ):  # ``verl.utils.tracking`` as an attribute, before anything imported it
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'verl.utils' has no attribute {name!r}")
