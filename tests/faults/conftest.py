"""Fault suite (issue 12): one test per bad input or fault an adversarial probe found.

Every test runs the engine's own code against the real Neo4j (and, for model faults, the
loopback OpenAI-compatible server); nothing of the engine is patched.

Embedder: the shipped default when it needs no server or when `make test` started one
(RAG_EMBED_ENDPOINT), so these tests share the vector index identity of the rest of the suite;
otherwise the built-in hash embedder (a developer's own Neo4j without an embedding server).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rag_engine.config import EngineConfig
from rag_engine.engine import Engine
from tests.conftest import ROOT, _neo4j_uri, with_artifacts

FALLBACK_EMBEDDER = "hash-embed-384"


def pick_embedder(cfg: EngineConfig) -> EngineConfig:
    model = cfg.model(cfg.defaults.embedding_model)
    provider = cfg.provider(model.provider) if model else None
    if provider is None or provider.kind == "local_hash" or os.environ.get("RAG_EMBED_ENDPOINT"):
        return cfg
    return cfg.model_copy(update={"defaults": cfg.defaults.model_copy(update={"embedding_model": FALLBACK_EMBEDDER})})


def engine_env(tmp_path: Path) -> dict[str, str]:
    env = {"NEO4J_URI": _neo4j_uri(), "RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}"}
    if os.environ.get("RAG_EMBED_ENDPOINT"):
        env["RAG_EMBED_ENDPOINT"] = os.environ["RAG_EMBED_ENDPOINT"]
    return env


def make_engine(cfg: EngineConfig, tmp_path: Path, **updates) -> Engine:
    cfg = pick_embedder(with_artifacts(cfg, tmp_path / "artifacts"))
    if updates:
        cfg = cfg.model_copy(update=updates)
    return Engine(cfg, ROOT, engine_env(tmp_path))


@pytest.fixture()
def fault_engine(base_config: EngineConfig, tmp_path: Path, neo4j_driver) -> Engine:
    eng = make_engine(base_config, tmp_path)
    yield eng
    eng.close()
