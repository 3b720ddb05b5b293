"""``rag serve`` warms the query path before it listens (rag_engine/retrieval/warm.py): one
retrieval with no model call, so it records no usage, and a store that is down is left to the
first request instead of failing the start."""

from __future__ import annotations

import socket

from rag_engine.engine import Engine
from rag_engine.retrieval.retriever import retrieve
from rag_engine.retrieval.warm import warm


def test_warm_up_runs_the_query_path_and_records_no_usage(ingested_engine):
    before = len(ingested_engine.ledger.records())
    out = warm(ingested_engine)
    assert out["warmed"] is True and out["ms"] > 0
    assert len(ingested_engine.ledger.records()) == before  # no model call
    # the checked active index is cached: a question's vector leg can ride in the fulltext statement
    result = retrieve(ingested_engine, "right to erasure", "legal_analyst", weights={"dense": 1.0})
    assert next(s for s in result.trace if s["step"] == "dense")["index_cached"] is True


def test_a_store_that_is_down_leaves_the_warm_up_to_the_first_request(ingested_engine):
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = Engine(
        ingested_engine.cfg, ingested_engine.root, {**ingested_engine.env, "NEO4J_URI": f"bolt://127.0.0.1:{port}"}
    )
    try:
        out = warm(down)
    finally:
        down.close()
    assert out["warmed"] is False and out["reason"]


def test_a_store_with_nothing_set_up_leaves_the_warm_up_to_the_first_request(ingested_engine):
    """A store no ingest has set up (here: a database that does not exist, the driver's
    ClientError, as a missing fulltext index is) never fails the service's start."""
    storage = ingested_engine.cfg.storage
    neo = storage.neo4j.model_copy(update={"database": "nothingsetuphere"})
    cfg = ingested_engine.cfg.model_copy(update={"storage": storage.model_copy(update={"neo4j": neo})})
    empty = Engine(cfg, ingested_engine.root, ingested_engine.env)
    try:
        out = warm(empty)
    finally:
        empty.close()
    assert out["warmed"] is False and out["reason"]


def test_the_warm_up_loads_the_clients_of_the_models_a_question_may_call():
    """An OpenAI-style answer model's SDK (about 0.6 s to import) is loaded at start, not by the
    first request; a model whose client cannot be built is left to its requests."""
    from types import SimpleNamespace

    from rag_engine.errors import MissingCredential
    from rag_engine.retrieval.warm import _preload_clients

    preloaded: list[str] = []

    def client(name: str):
        if name == "keyless":
            raise MissingCredential("no key")
        return SimpleNamespace(preload=lambda: preloaded.append(name))

    defaults = SimpleNamespace(generation_model="chat", local_inference_model="keyless", local_rerank_model="chat")
    _preload_clients(SimpleNamespace(cfg=SimpleNamespace(defaults=defaults), client=client))
    assert preloaded == ["chat"]


def test_preloading_a_plain_client_leaves_the_question_embedder_check_alone(engine):
    """``ModelClient.preload`` is not the question embedder's ``prepare`` (its check against the
    server): an embedder without ``in_process`` has no check to make."""
    spec = engine.registry.embedding
    if spec.model.in_process is not None:
        cfg_models = [
            m.model_copy(update={"in_process": None}) if m.name == spec.name else m for m in engine.cfg.models
        ]
        engine = Engine(engine.cfg.model_copy(update={"models": cfg_models}), engine.root, engine.env)
    assert engine.prepare_question_embedder() is False
