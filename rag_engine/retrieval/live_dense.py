"""Live rows on the dense leg: each row of the live SQL leg is embedded (the passage side of the
active embedder, on the question's deadline) and placed in the dense leg's ranking by its cosine
to the question, on the vector index's own scale (``(1 + cos) / 2`` for a cosine index).

Each row's sentences are embedded in the same call, so a row has sentence evidence (and a margin
for the answer-or-refuse decision) as a stored passage does.

Without this a live row had one leg's share of the fusion (its source's own text rank) against
stored chunks that both store legs rank: a row that alone answers the question was measured 13th.
Placed on the dense leg, it competes on its evidence as a stored passage would. Nothing here is
fitted: the row's place is its cosine among the stored passages' cosines.

A failed or late embedding leaves the rows on their own leg and says so
(``live_rows_not_embedded``); the query goes on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rag_engine.errors import RagError
from rag_engine.providers.registry import LIVE_ROWS_PURPOSE
from rag_engine.store.units import encode
from rag_engine.text.sentences import embedded_passage, embedded_units

if TYPE_CHECKING:
    from rag_engine.engine import Engine


def index_scores(query_vec: list[float], vectors: list[list[float]]) -> list[float]:
    """Each vector's cosine to the question, as the cosine vector index scores it: (1 + cos) / 2."""
    q = np.asarray(query_vec, dtype=np.float64)
    m = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(m, axis=1) * np.linalg.norm(q)
    cos = np.divide(m @ q, norms, out=np.zeros(len(m)), where=norms > 0)
    return [float(s) for s in (1.0 + cos) / 2.0]


@dataclass
class LiveOnDense:
    """What placing the live rows gives the rest of the question: the dense leg with them, each
    row's sentence-evidence material (``cosine`` on the index's scale and ``units``, its unit
    vectors encoded as the store keeps a chunk's), the trace fields and the events."""

    dense: list[dict[str, Any]]
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)
    trace: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)


def place_on_dense(
    engine: Engine, live_rows: list[dict[str, Any]], dense: list[dict[str, Any]], query_vec: list[float]
) -> LiveOnDense:
    """The dense leg with the live rows placed among its rows by score (a stored chunk keeps its
    place on a tie). Each row is embedded as ingest embeds a chunk (heading, then text) and so are
    its units (``embedded_units``), in one call: a row then has sentence evidence like a stored
    passage (without it, its evidence margin read as none and the answer was refused)."""
    started = time.perf_counter()
    units = [embedded_units(str(r["heading"]), str(r["text"])) for r in live_rows]
    texts = [embedded_passage(str(r["heading"]), str(r["text"])) for r in live_rows] + [t for u in units for t in u]
    try:
        vectors = engine.embed_texts(texts, purpose=LIVE_ROWS_PURPOSE)
    except RagError as exc:
        event = {"event": "live_rows_not_embedded", "error_type": type(exc).__name__, "rows": len(live_rows)}
        return LiveOnDense(dense, trace={"on_dense": 0, "dense_error": type(exc).__name__}, events=[event])
    scores = index_scores(query_vec, vectors[: len(live_rows)])
    scored = [{**r, "score": s} for r, s in zip(live_rows, scores, strict=True)]
    merged = sorted([*dense, *scored], key=lambda r: -float(r.get("score") or 0.0))  # stable: stored rows first
    live_ids = {r["chunk_id"] for r in scored}
    evidence: dict[str, dict[str, Any]] = {}
    at = len(live_rows)
    for row, score, row_units in zip(live_rows, scores, units, strict=True):
        blob = encode(vectors[at : at + len(row_units)], len(query_vec))
        evidence[row["chunk_id"]] = {"cosine": score, "units": blob}
        at += len(row_units)
    trace = {
        "on_dense": len(scored),
        "dense_places": {r["chunk_id"]: i for i, r in enumerate(merged, 1) if r["chunk_id"] in live_ids},
        "embed_ms": round((time.perf_counter() - started) * 1000, 2),
    }
    return LiveOnDense(merged, evidence, trace)
