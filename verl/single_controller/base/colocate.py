"""Several worker roles (actor, critic, ref, ...) in one process per rank.

``create_colocated_worker_class`` builds a ``Worker`` subclass that constructs one instance of every role class and
exposes each role's registered method ``m`` as ``<role>_m``, with the same dispatch spec. A group of that class
then ``spawn``s one view per role in which ``m`` is bound again under its own name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from verl.single_controller.base.decorator import MAGIC_ATTR, MethodSpec, registered_methods
from verl.single_controller.base.worker import Worker
from verl.single_controller.base.worker_group import COLOCATED_ROLES_ATTR, ClassWithInitArgs

RoleInit = tuple[type, tuple[Any, ...], dict[str, Any]]


class ColocatedWorker(Worker):
    """Holds one worker per role in ``self.worker_dict``; concrete subclasses add the ``<role>_<method>`` methods."""

    def __init__(self, role_inits: Mapping[str, RoleInit]) -> None:
        # The role workers run their own Worker set-up in this process and so see the same rank and MASTER_*.
        self.worker_dict: dict[str, Any] = {
            role: cls(*args, **kwargs) for role, (cls, args, kwargs) in role_inits.items()
        }


def _forwarder(role: str, name: str, spec: MethodSpec, doc: str | None) -> Callable[..., Any]:
    def forward(self: ColocatedWorker, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.worker_dict[role], name)(*args, **kwargs)

    forward.__name__ = f"{role}_{name}"
    forward.__qualname__ = f"ColocatedWorker.{role}_{name}"
    forward.__doc__ = doc
    setattr(forward, MAGIC_ATTR, spec)
    return forward


def create_colocated_worker_class(class_dict: Mapping[str, ClassWithInitArgs]) -> tuple[type, dict[str, RoleInit]]:
    """Build the colocated worker class for ``class_dict`` (role -> class with init args).

    Returns ``(cls, role_inits)``: construct with ``cls(role_inits)``. Role names must be identifiers and each
    role class a ``Worker`` subclass.
    """
    if not class_dict:
        raise ValueError("create_colocated_worker_cls needs at least one role")
    roles: dict[str, type] = {}
    role_inits: dict[str, RoleInit] = {}
    methods: dict[str, Callable[..., Any]] = {}
    for role, cia in class_dict.items():
        if not isinstance(role, str) or not role.isidentifier():
            raise ValueError(f"role names must be Python identifiers, got {role!r}")
        if not isinstance(cia, ClassWithInitArgs):
            raise TypeError(f"role {role!r}: expected a ClassWithInitArgs, got {type(cia).__name__}")
        user_cls = cia.user_cls
        if not issubclass(user_cls, Worker):
            raise TypeError(f"role {role!r}: {user_cls.__name__} must derive from verl.single_controller.base.Worker")
        roles[role] = user_cls
        role_inits[role] = (user_cls, tuple(cia.args), dict(cia.kwargs))
        for name, spec in registered_methods(user_cls).items():
            doc = getattr(getattr(user_cls, name), "__doc__", None)
            methods[f"{role}_{name}"] = _forwarder(role, name, spec, doc)
    name = "Colocated_" + "_".join(roles)
    namespace: dict[str, Any] = {**methods, COLOCATED_ROLES_ATTR: roles, "__module__": ColocatedWorker.__module__}
    return type(name, (ColocatedWorker,), namespace), role_inits
