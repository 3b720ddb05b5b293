"""Warm the query path once at service start, so the first request does not pay for what every
later one finds ready: the store connection, the checked vector index and the planner's edge
caches (store epochs), the server's plans of the query path's statements, the rerank model and
the question-side text analysis. One retrieval of a fixed question with the dense and live legs
off, then the active vector index checked against the embedder and cached: no model call, no
usage record, no audit record (retrieval alone writes none). Then the clients of the models a
question may call are built and loaded (``ModelClient.preload``: an OpenAI-style provider's SDK,
about 0.6 s to import, is otherwise imported at the first chat completion), again without a call."""

from __future__ import annotations

import logging
import time
from typing import Any

from rag_engine.errors import RagError

WARM_QUESTION = "What does the rule require of the firm and its records?"

log = logging.getLogger(__name__)


def warm(engine: Any) -> dict[str, Any]:
    """One retrieval as the role reading the most collections; a failure (the store not up yet,
    nothing ingested: no index, no database) is logged and left to the first request, never a
    failed start."""
    from neo4j.exceptions import Neo4jError

    from rag_engine.retrieval.retriever import retrieve
    from rag_engine.store.connection import UNREACHABLE
    from rag_engine.store.epochs import active_index
    from rag_engine.store.session import read_transaction

    roles = engine.cfg.roles
    if not roles:
        return {"warmed": False, "reason": "no role"}
    role = max(sorted(roles), key=lambda r: len(roles[r]))
    started = time.perf_counter()
    try:
        result = retrieve(engine, WARM_QUESTION, role, weights={"dense": 0.0, "live": 0.0})
        with read_transaction(engine.driver, engine.database, packs=engine.packs) as rx:
            active_index(rx, engine.embedder_identity)
    # the driver's own errors (unreachable; no index or database yet) are mapped at the CLI, not here
    except (RagError, Neo4jError, *UNREACHABLE) as exc:
        log.warning("query path not warmed (%s): the first request pays for it", type(exc).__name__)
        return {"warmed": False, "reason": type(exc).__name__}
    _preload_clients(engine)
    ms = round((time.perf_counter() - started) * 1000, 1)
    log.info("query path warmed in %s ms (%d steps)", ms, len(result.trace))
    return {"warmed": True, "ms": ms}


def _preload_clients(engine: Any) -> None:
    """The clients of the question's models (answer, local inference, rerank endpoint), loaded; a
    model whose client cannot be built (a missing key) is left to fail its requests as before."""
    d = engine.cfg.defaults
    for name in dict.fromkeys((d.generation_model, d.local_inference_model, d.local_rerank_model)):
        if not name:
            continue
        try:
            engine.client(name).preload()
        except RagError as exc:
            log.info("model %s not preloaded (%s): its first call loads it", name, type(exc).__name__)
