"""The query path's read of sentence evidence: for the top candidates, each chunk's cosine to the
question and its units' vectors (``ingest.unit_vectors``), in one statement of the question's
read transaction, on the active index only (``epochs.active_index`` checks the embedder)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rag_engine.store.epochs import active_index
from rag_engine.store.reads import SERVED, scope
from rag_engine.store.session import Reads

UNITS_SUFFIX = "_units"
DTYPE = "<f2"
"""Unit vectors are stored as float16, little-endian, one after another (a byte array property)."""


def encode(vectors: Sequence[Sequence[float]], dimension: int) -> bytes:
    if not vectors:
        return b""
    return np.asarray(vectors, dtype=DTYPE).reshape(len(vectors), dimension).tobytes()


def decode(blob: bytes | None, dimension: int) -> np.ndarray:
    """(units, dimension) float32 array; empty when there is nothing usable."""
    if not blob or dimension <= 0 or len(blob) % (2 * dimension):
        return np.zeros((0, max(dimension, 1)), dtype=np.float32)
    return np.frombuffer(blob, dtype=DTYPE).reshape(-1, dimension).astype(np.float32)


def chunk_evidence(
    rx: Reads,
    chunk_ids: list[str],
    embedding: list[float] | None,
    identity: str,
    collections: tuple[str, ...],
    splitter: str,
) -> dict[str, dict[str, Any]]:
    """Per served chunk id (``reads.SERVED``): ``cosine`` (the chunk's vector against ``embedding``, None without
    one) and ``units`` (the unit vectors' bytes when made by ``splitter``, else None)."""
    if not chunk_ids:
        return {}
    active, _cached = active_index(rx, identity)
    rows = rx.values(
        f"MATCH (c:Chunk) WHERE c.chunk_id IN $ids AND {SERVED} "
        "RETURN c.chunk_id AS chunk_id, "
        "CASE WHEN $embedding IS NULL OR c[$property] IS NULL THEN null "
        "ELSE vector.similarity.cosine(c[$property], $embedding) END AS cosine, "
        "CASE WHEN c.units_splitter = $splitter THEN c[$units] END AS units",
        ids=chunk_ids,
        property=active.property,
        units=active.property + UNITS_SUFFIX,
        embedding=embedding,
        splitter=splitter,
        **scope(rx, collections),
    )
    return {r["chunk_id"]: {"cosine": r["cosine"], "units": r["units"]} for r in rows}
