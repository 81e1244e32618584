"""Errors raised on every floor: the ground floor defines them so no module imports upward to raise one.

``verl.trainer.config`` re-exports them, where users catch them.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """An invalid config; ``problems`` holds one message per problem (the message joins them with newlines)."""

    def __init__(self, problems: list[str] | str) -> None:
        self.problems: list[str] = [problems] if isinstance(problems, str) else list(problems)
        n = len(self.problems)
        header = f"invalid config ({n} problem{'s' if n != 1 else ''}):"
        super().__init__("\n".join([header, *(f"  - {p}" for p in self.problems)]))


class ConfigLineError(ConfigError):
    """One config problem, its message one line naming the key (no ``invalid config`` header). A
    :class:`ConfigError`, so the entry points print it without a traceback and exit with code 2."""

    def __init__(self, message: str) -> None:
        self.problems = [message]
        Exception.__init__(self, message)


class UserCodeError(ConfigLineError):
    """Code the config names (a reward function file, an agent) is missing or cannot be loaded; raised before any
    model loads. The subclasses below are also the builtin error a caller of the loader may already catch."""


class UserCodeNotFoundError(UserCodeError, FileNotFoundError):
    """The file the config names does not exist."""


class UserCodeImportError(UserCodeError, ImportError):
    """The file or module the config names failed to import."""


class UserCodeAttributeError(UserCodeError, AttributeError):
    """The module has no function of the configured name."""


class UserCodeTypeError(UserCodeError, TypeError):
    """The configured name is not callable."""


class RunHealthError(RuntimeError):
    """A run that ended, or must end, without training anything useful (no step trained, a reward that failed for
    every sample, steps in a row); ``str(err)`` is one line. The entry points print it and exit with code 1."""


class ConfigWarning(UserWarning):
    """A legal but suspicious config (e.g. a KL penalty applied twice)."""


class DataProtoError(ValueError, AssertionError):
    """A DataProto / TensorDict operation got data it cannot use (mismatched batch sizes, an uneven chunk, a union
    conflict).

    It is a ``ValueError`` (the project's convention for bad input) and also an ``AssertionError``, because verl
    raises these cases with ``assert`` and its tests and recipes catch ``AssertionError``.
    """
