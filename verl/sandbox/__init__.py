"""Running code nobody trusts: the sandbox jail and the reward process pool (also ``verl.sandbox``).

- :mod:`verl.sandbox.jail`: :func:`run_python_sandboxed` runs untrusted Python (model-written code) in its own
  namespaces as an unprivileged user with time, memory and output limits; :func:`sandbox_support` says what this
  machine allows;
- :mod:`verl.sandbox.jail_setup`: the first stage of a jailed run, executed as a standalone script inside the
  fresh namespaces (it builds the program's view of the file system, then drops privileges);
- :mod:`verl.sandbox.process_pool`: :class:`~verl.sandbox.process_pool.ProcessPool`, worker processes
  that run the reward function on many inputs with time limits that really stop the work.

``from verl.sandbox import run_python_sandboxed`` is the import the docs use; the pool is imported from its
module (``python -m verl.sandbox.process_pool`` is how its workers start, so the package does not import it).
"""

from verl.sandbox.jail import (
    HIDDEN_DIRS,
    SandboxResult,
    SandboxUnavailableError,
    run_python_sandboxed,
    sandbox_support,
)

__all__ = ["HIDDEN_DIRS", "SandboxResult", "SandboxUnavailableError", "run_python_sandboxed", "sandbox_support"]
