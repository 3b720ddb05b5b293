"""The one resource: the engine runtime, built once per process from the config file.

A pack that fails to load (a manifest its code does not support, a missing factory, a module
that raises anything at import) must not take the code location down: the engine is built over
the packs that load, and the broken ones are kept with their typed error (``broken_packs``) for
the domain_packs check. A bad config or provider registry still stops loading: that is every
pack's problem.
"""

from __future__ import annotations

from functools import lru_cache

import dagster as dg

from rag_engine import DEFAULT_CONFIG
from rag_engine.config import load_config, under_root
from rag_engine.engine import Engine, project_root
from rag_engine.packs import load_packs


@lru_cache(maxsize=8)
def _load(config_path: str) -> tuple[Engine, dict[str, str]]:
    root = project_root()
    cfg = load_config(under_root(root, config_path))
    packs, broken = load_packs(cfg, root)  # any failure of a pack's own code is its PackError
    engine = Engine(cfg, root, None, packs=packs)  # the registry is validated here (typed errors)
    return engine, {name: f"{type(exc).__name__}: {exc}" for name, exc in broken.items()}


def engine_for(config_path: str) -> Engine:
    return _load(config_path)[0]


def broken_packs(config_path: str) -> dict[str, str]:
    """Enabled packs that failed to load: name -> "ErrorType: message"."""
    return dict(_load(config_path)[1])


class EngineResource(dg.ConfigurableResource):
    """Config path relative to the project root (RAG_ROOT or the repository)."""

    config_path: str = DEFAULT_CONFIG

    def engine(self) -> Engine:
        return engine_for(self.config_path)

    def broken_packs(self) -> dict[str, str]:
        return broken_packs(self.config_path)
