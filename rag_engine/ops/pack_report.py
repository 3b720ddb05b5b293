"""A one-look summary of the enabled packs (used by `rag packs smoke` and the domain_packs asset)."""

from __future__ import annotations

from typing import Any

from rag_engine.engine import Engine
from rag_engine.ingest.documents import discover


def pack_summary(engine: Engine) -> dict[str, Any]:
    packs = engine.packs
    return {
        "pack_count": len(packs),
        "domains": {name: p.entry.domain for name, p in packs.items()},
        "versions": {name: p.manifest.version for name, p in packs.items()},
        "documents": {name: len(discover(p)) for name, p in packs.items()},
        "collections": {name: list(p.manifest.collections) for name, p in packs.items()},
        "broken": {name: f"{type(exc).__name__}: {exc}" for name, exc in engine.broken_packs.items()},
    }
