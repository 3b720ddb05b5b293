"""RAG engine: the query path and offline building blocks. Never imports dagster.

This module stays import-free: the CLI reads ``DEFAULT_CONFIG`` before a command runs, and
``rag --help`` must not pay for the driver or the engine."""

DEFAULT_CONFIG = "config/engine.yaml"
"""The engine config file, relative to the project root (``--config`` / ``$RAG_CONFIG`` override it)."""
