"""Fault suite: one test per bad input or fault an adversarial probe found.

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
    cfg = with_artifacts(cfg, tmp_path / "artifacts")
    if updates:
        cfg = cfg.model_copy(update=updates)
    cfg = pick_embedder(cfg)
    return Engine(cfg, ROOT, engine_env(tmp_path))


@pytest.fixture
def fault_engine(base_config: EngineConfig, tmp_path: Path, neo4j_driver) -> Engine:
    eng = make_engine(base_config, tmp_path)
    yield eng
    eng.close()


def llm_engine(
    cfg: EngineConfig,
    tmp_path: Path,
    server_url: str,
    *,
    budgets: dict | None = None,
    graph: dict | None = None,
    generation: bool = False,
) -> Engine:
    """An engine whose extraction model (and with ``generation`` its answer model) is the
    loopback OpenAI-compatible server."""
    from rag_engine.config import ModelConfig, ProviderConfig

    provider = ProviderConfig(
        name="fake_llm", kind="openai_compatible", hosted=False, endpoint=server_url, max_retries=0, timeout_s=10
    )
    model = ModelConfig(
        name="fake-chat",
        provider="fake_llm",
        role="generation",
        served_model="fake-model",
        capabilities=("generation", "structured_output"),
        pricing_ref="gpt-4o-mini",
    )
    updates: dict = {
        "providers": (*cfg.providers, provider),
        "models": (*cfg.models, model),
        "defaults": cfg.defaults.model_copy(
            update={"extraction_model": "fake-chat", **({"generation_model": "fake-chat"} if generation else {})}
        ),
    }
    if budgets:
        updates["budgets"] = cfg.budgets.model_copy(update=budgets)
    if graph:
        updates["graph"] = cfg.graph.model_copy(update=graph)
    return make_engine(cfg, tmp_path, **updates)
