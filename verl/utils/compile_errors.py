"""What a failed ``torch.compile`` raises, and its cause in one line (for the fallbacks that keep a run going).

Dynamo wraps every backend error (e.g. the ``TypeError`` of inductor's split-scan code generation on CUDA) in
``BackendCompilerFailed`` (inductor's own ``InductorError`` is a subclass) and refuses untraceable code with
``Unsupported``: all are ``TorchDynamoException``. It raises them at the first call of the compiled function (or at a
recompilation), after tracing on fake tensors, so a failed compilation has run nothing.
"""

from __future__ import annotations

import torch._dynamo.exc

COMPILE_ERRORS: tuple[type[Exception], ...] = (torch._dynamo.exc.TorchDynamoException,)


def compile_failure_summary(err: BaseException) -> str:
    """``"<type>: <first line>"`` of the error behind ``err``: the backend's own (dynamo's wrapper's first line only
    names the backend), else ``err``'s cause, else ``err``."""
    inner = getattr(err, "inner_exception", None)
    cause = inner if isinstance(inner, BaseException) else (err.__cause__ or err)
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[0][:300] if lines else ''}"
