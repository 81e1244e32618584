"""Loading user code by file path or module name (``data.custom_cls``, ``custom_reward_function``,
``actor_rollout_ref.model.external_lib``), as verl's ``verl.utils.import_utils``."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any

__all__ = ["import_external_libs", "load_class", "load_extern_object", "load_extern_type", "load_module"]


def load_module(module_path: str, module_name: str | None = None) -> Any:
    """Import a python file (``/path/to/file.py``) or an importable module name (``pkg.mod``) and return the module.

    A file is registered in ``sys.modules`` under ``module_name`` (default: ``custom_module_<file stem>``) so the
    classes it defines pickle by reference. A missing file raises FileNotFoundError naming it.
    """
    if not module_path:
        raise ValueError("load_module: module_path is empty")
    if module_path.startswith("pkg://"):
        module_path = module_path[len("pkg://") :]
    is_file = module_path.endswith(".py") or os.path.sep in module_path
    if not is_file:
        return importlib.import_module(module_path)
    path = module_path[len("file://") :] if module_path.startswith("file://") else module_path
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Custom type file '{path}' not found.")
    name = module_name or f"custom_module_{os.path.splitext(os.path.basename(path))[0]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load python file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(name, None)
        raise RuntimeError(f"Error loading module from '{path}': {type(e).__name__}: {e}") from e
    return module


def load_class(class_name: str, where: str) -> type:
    """Import the class at the dotted path ``package.module.ClassName``; errors name ``where`` (the config key or file
    and entry that asked for it)."""
    if not isinstance(class_name, str) or "." not in class_name:
        raise ValueError(f"{where}: class_name={class_name!r} must be a dotted path such as pkg.module.ClassName")
    module_name, attr = class_name.rsplit(".", 1)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"{where}: class_name={class_name!r}: cannot import module {module_name!r}: {e}") from e
    cls = getattr(module, attr, None)
    if not isinstance(cls, type):
        raise ValueError(f"{where}: class_name={class_name!r}: module {module_name!r} has no class {attr!r}")
    return cls


def load_extern_type(file_path: str | None, type_name: str | None) -> Any:
    """The object named ``type_name`` in the python file (or module) ``file_path``; ``None`` if ``file_path`` is
    unset. A missing name raises AttributeError naming the file and the names it defines."""
    if not file_path:
        return None
    if not type_name:
        raise ValueError(f"load_extern_type: a name is needed to pick an object from {file_path}")
    module = load_module(file_path)
    if not hasattr(module, type_name):
        public = sorted(n for n in vars(module) if not n.startswith("_"))
        raise AttributeError(f"Custom type '{type_name}' not found in '{file_path}'; it defines {public}")
    return getattr(module, type_name)


def load_extern_object(module_path: str, object_name: str) -> Any:
    """Upstream's name for :func:`load_extern_type` with a required path: the object ``object_name`` of the python
    file or module ``module_path`` (``pkg://`` and ``file://`` prefixes accepted). A missing path or object raises
    ``AttributeError``."""
    if not module_path:  # AttributeError, as upstream's (the object is not found anywhere)
        raise AttributeError(f"load_extern_object: no module path given, so {object_name!r} cannot be found")
    return load_extern_type(module_path, object_name)


def import_external_libs(external_libs: str | list[str] | None = None) -> None:
    """Import each module name in ``external_libs`` (e.g. a package that registers a custom model architecture)."""
    if external_libs is None:
        return
    for lib in [external_libs] if isinstance(external_libs, str) else list(external_libs):
        importlib.import_module(lib)
