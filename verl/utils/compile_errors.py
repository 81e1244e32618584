"""What a failed ``torch.compile`` raises, and its cause in one line (for the fallbacks that keep a run going).

Dynamo wraps every backend error (e.g. the ``TypeError`` of inductor's split-scan code generation on CUDA) in
``BackendCompilerFailed`` (inductor's own ``InductorError`` is a subclass) and refuses untraceable code with
``Unsupported``: all are ``TorchDynamoException``. It raises them at the first call of the compiled function (or at a
recompilation), after tracing on fake tensors, so a failed compilation has run nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch._dynamo.exc

COMPILE_ERRORS: tuple[type[Exception], ...] = (torch._dynamo.exc.TorchDynamoException,)


def compile_failure_summary(err: BaseException) -> str:
    """``"<type>: <first line>"`` of the error behind ``err``: the backend's own (dynamo's wrapper's first line only
    names the backend), else ``err``'s cause, else ``err``."""
    inner = getattr(err, "inner_exception", None)
    cause = inner if isinstance(inner, BaseException) else (err.__cause__ or err)
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[0][:300] if lines else ''}"


class CompiledOrEager:
    """A compiled callable that runs its eager form once compiling has failed in any callable sharing ``state``
    (``{"failed": False}`` for a set compiled together), when ``eager_on_failure`` (``use_torch_compile: null``:
    auto-compilation must never stop a run that works eagerly); else the compile error propagates. The first
    failure logs one warning on ``log`` naming ``what`` was compiled. Only compile errors are caught
    (:data:`COMPILE_ERRORS`); dynamo traces on fake tensors, so a failed compilation has run nothing and the eager
    call starts from the same state. A failure while autograd compiles a compiled forward's backward lazily is not
    caught here."""

    def __init__(
        self,
        compiled: Callable[..., Any],
        eager: Callable[..., Any],
        state: dict[str, bool],
        what: str,
        log: logging.Logger,
        eager_on_failure: bool = True,
    ) -> None:
        self.compiled, self.eager, self.state = compiled, eager, state
        self.what, self.log, self.eager_on_failure = what, log, eager_on_failure

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.state["failed"]:
            try:
                return self.compiled(*args, **kwargs)
            except COMPILE_ERRORS as err:
                if not self.eager_on_failure:
                    raise
                self.state["failed"] = True
                self.log.warning(
                    "use_torch_compile (auto): compiling the %s failed (%s); they run eagerly "
                    "(set use_torch_compile=false to skip compiling, true to stop on the error)",
                    self.what,
                    compile_failure_summary(err),
                )
        return self.eager(*args, **kwargs)
