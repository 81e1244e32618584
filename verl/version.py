"""The package version, read by pyproject.toml and exposed as ``verl.__version__``."""

__version__ = "0.1.0"
