"""The one resource: the engine runtime, built once per process from the config file."""

from __future__ import annotations

from functools import lru_cache

import dagster as dg

from rag_engine.engine import DEFAULT_CONFIG, Engine


@lru_cache(maxsize=4)
def _engine(config_path: str) -> Engine:
    return Engine.from_path(config_path)


class EngineResource(dg.ConfigurableResource):
    """Config path relative to the project root (RAG_ROOT or the repository)."""

    config_path: str = DEFAULT_CONFIG

    def engine(self) -> Engine:
        return _engine(self.config_path)
