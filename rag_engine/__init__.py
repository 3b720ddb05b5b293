"""RAG engine: the query path and offline building blocks. Never imports dagster.

This module stays import-free: the CLI reads ``DEFAULT_CONFIG`` before a command runs, and
``rag --help`` must not pay for the driver or the engine."""

DEFAULT_CONFIG = "config/engine.yaml"
"""The engine config file, relative to the project root (``--config`` / ``$RAG_CONFIG`` override it)."""


def package_version() -> str:
    """The installed rag-engine version ("unknown" outside an install): what `rag --version` prints
    and the query service reports. The import stays inside, so importing the package costs nothing."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rag-engine")
    except PackageNotFoundError:
        return "unknown"
