"""No literal default is read off a config object anywhere in ``verl/``: each default lives in its dataclass.

A config default has one home, the dataclass field (``verl/trainer/config/schema.py``, ``verl/algorithms/config.py``,
``verl/sections/`` (re-exported by ``verl.workers.config``), the offline and SFT schemas), whose packaged YAML a test
keeps identical. Code reads the typed field; a component that receives a ``DictConfig`` or a user's partial section
converts it at its door with ``omega_conf_to_dataclass``, which completes missing keys from the dataclass. This test
scans the AST of every module under ``verl/`` and fails, naming ``file:line``, on:

* ``<config>.get("key", <literal>)`` where ``<config>`` (the name or attribute the call is made on) looks like a
  config section: ``config``, ``cfg``, ``conf``, ``section``, a name ending in ``_config``/``_cfg``/``_conf``/
  ``_section``, or one of the section names in :data:`SECTION_NAMES`; ``<literal>`` is any constant but ``None``,
  a negative number or a list/tuple/set/dict display;
* ``getattr(<config>, "key", <literal>)`` on a name of the first kind (``config``, ``*_config``, ...): a section
  name such as ``trainer``, ``actor`` or ``rollout`` is, as a ``getattr`` target, the trainer, worker or engine
  object of that name, not its config;
* ``get_config_value(..., <default>)`` with any default but ``None`` (the dataclass is the default);
* ``OmegaConf.select(..., default=<literal>)`` (a private sentinel object, to tell "absent" apart, is fine).

What is not config is out of scope, and the rule says so by name rather than by a long allow-list: ``meta_info``,
``non_tensor_batch``, ``kwargs``, JSON rows and HTTP bodies never match the pattern; a Hugging Face model config is
named ``hf_config`` (or ``hf_*``) and is excluded, as it is transformers' object, not ours. The few calls left on
a name that looks like config but is not one are listed, each with its reason, in :data:`ALLOWED`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import verl

PACKAGE = Path(verl.__file__).resolve().parent

# section names of ppo_trainer.yaml (and the offline trainers) that code binds to a local of the same name
SECTION_NAMES = {
    "actor",
    "algorithm",
    "critic",
    "data",
    "engine",
    "judge",
    "kl_ctrl",
    "mcfg",
    "model",
    "multi_turn",
    "optim",
    "overlong_buffer",
    "policy_loss",
    "ref",
    "reward_model",
    "rollout",
    "trainer",
    "val_kwargs",
}
_CONFIG_NAME = re.compile(r"^(config|cfg|conf|section|\w+_(config|cfg|conf|section))$")

# (path relative to verl/, receiver name, key): calls on a name that looks like config but holds something else.
# Keep this short: prefer renaming the variable (an HF config is ``hf_config``) or reading the typed field.
ALLOWED: dict[tuple[str, str, str], str] = {
    # a Hugging Face model's vision sub-config (transformers' object): older vision towers do not set the key
    ("models/vlm.py", "vision_config", "spatial_merge_size"): "HF vision config",
}


def _receiver(node: ast.expr) -> str | None:
    """The name a call is made on: ``cfg`` for ``cfg.get``, ``rollout`` for ``self.config.rollout.get``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _looks_like_config(name: str | None, sections: bool = True) -> bool:
    if name is None or name.startswith("hf_"):
        return False
    return (sections and name in SECTION_NAMES) or bool(_CONFIG_NAME.match(name))


def _is_literal(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value is not None
    if isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant):
        return True
    return isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict))


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _str_arg(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _findings(path: Path) -> list[tuple[int, str, str, str]]:
    """``(line, receiver, key, source)`` of each inline config default in one module."""
    out = []
    for call in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(call, ast.Call):
            continue
        func, args = call.func, call.args
        hit: tuple[str, str] | None = None
        if isinstance(func, ast.Attribute) and func.attr == "get" and len(args) == 2 and _str_arg(args[0]):
            if _is_literal(args[1]) and _looks_like_config(_receiver(func.value)):
                hit = (_receiver(func.value) or "", _str_arg(args[0]) or "")
        elif isinstance(func, ast.Name) and func.id == "getattr" and len(args) == 3 and _str_arg(args[1]):
            if _is_literal(args[2]) and _looks_like_config(_receiver(args[0]), sections=False):
                hit = (_receiver(args[0]) or "", _str_arg(args[1]) or "")
        elif (isinstance(func, ast.Name) and func.id == "get_config_value") or (
            isinstance(func, ast.Attribute) and func.attr == "get_config_value"
        ):
            default = args[2] if len(args) > 2 else _keyword(call, "default")
            if default is not None and not _is_none(default):
                hit = ("get_config_value", (_str_arg(args[1]) if len(args) > 1 else None) or "?")
        elif isinstance(func, ast.Attribute) and func.attr == "select":
            default = _keyword(call, "default")
            if default is not None and _is_literal(default):
                hit = ("OmegaConf.select", (_str_arg(args[1]) if len(args) > 1 else None) or "?")
        if hit is not None:
            out.append((call.lineno, hit[0], hit[1], ast.unparse(call)))
    return out


def inline_config_defaults() -> list[str]:
    """Every inline config default in ``verl/`` not in :data:`ALLOWED`, as ``file:line: source``."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for line, receiver, key, source in _findings(path):
            if (rel, receiver, key) not in ALLOWED:
                found.append(f"verl/{rel}:{line}: {source}")
    return found


def test_no_literal_config_default_is_read_inline() -> None:
    found = inline_config_defaults()
    assert not found, (
        f"{len(found)} literal config default(s) read inline; read the typed dataclass field instead "
        "(convert with omega_conf_to_dataclass at the component's door):\n" + "\n".join(found)
    )


def test_the_allow_list_is_short_and_still_needed() -> None:
    assert len(ALLOWED) <= 10, "the allow-list is for non-config objects only; read typed fields instead"
    live = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        live.update((rel, receiver, key) for _, receiver, key, _ in _findings(path))
    stale = sorted(set(ALLOWED) - live)
    assert not stale, f"allow-list entries that match nothing any more (remove them): {stale}"


def test_the_scan_catches_each_form(tmp_path: Path) -> None:
    src = (
        "cfg.get('a', 1)\n"
        "self.config.rollout.get('b', [])\n"
        "get_config_value(x, 'c', 0.2)\n"
        "OmegaConf.select(c, 'd', default=False)\n"
        "getattr(actor_config, 'e', -1)\n"
        "getattr(trainer, 'global_steps', 0)\n"
        "meta_info.get('f', 0)\n"
        "hf_config.get('g', 1)\n"
        "cfg.get('h')\n"
        "get_config_value(x, 'i', None)\n"
        "OmegaConf.select(c, 'j', default=_ABSENT)\n"
    )
    module = tmp_path / "m.py"
    module.write_text(src)
    assert [line for line, *_ in _findings(module)] == [1, 2, 3, 4, 5]
