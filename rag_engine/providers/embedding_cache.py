"""Persistent cache of passage embeddings, and batched embedding through it.

Embedding a corpus with a neural model is the slow (or paid) part of indexing; a re-ingest of
unchanged chunks must not pay it again. Vectors are keyed by (embedder identity, sha256 of the
exact text embedded): the identity carries provider, served model, dimension and mode scheme,
so a vector is reused only where the same model would have produced it. Only the index side is
cached (passages are embedded once and again on every re-ingest); questions are not.

SQLite, one small file (``storage.embedding_cache``), opened per operation with WAL and a busy
timeout so several processes (Dagster run workers, a CLI ingest, tests) can share it.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    identity TEXT NOT NULL,
    text_sha256 TEXT NOT NULL,
    dimension INTEGER NOT NULL,
    vector BLOB NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (identity, text_sha256)
) WITHOUT ROWID
"""
_LOOKUP_CHUNK = 500  # SQLite caps the number of bound parameters per statement


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """(identity, sha256(text)) -> float32 vector, persisted in SQLite."""

    def __init__(self, path: str | Path, *, timeout_s: float = 30.0):
        self.path = Path(path)
        self._timeout = timeout_s
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as db, db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(_SCHEMA)

    def __repr__(self) -> str:
        return f"EmbeddingCache({self.path.name})"

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=self._timeout)

    def get_many(self, identity: str, digests: Sequence[str], dimension: int) -> dict[str, list[float]]:
        """The cached vectors among ``digests``; a row of the wrong size counts as a miss."""
        found: dict[str, list[float]] = {}
        unique = list(dict.fromkeys(digests))
        with closing(self._connect()) as db:
            for start in range(0, len(unique), _LOOKUP_CHUNK):
                part = unique[start : start + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(part))
                rows = db.execute(
                    f"SELECT text_sha256, dimension, vector FROM embeddings "
                    f"WHERE identity = ? AND text_sha256 IN ({marks})",
                    [identity, *part],
                ).fetchall()
                for digest, dim, blob in rows:
                    if dim == dimension and len(blob) == 4 * dimension:
                        found[digest] = np.frombuffer(blob, dtype=np.float32).astype(float).tolist()
        return found

    def put_many(self, identity: str, items: Sequence[tuple[str, Sequence[float]]]) -> None:
        now = time.time()
        rows = [(identity, digest, len(vec), np.asarray(vec, dtype=np.float32).tobytes(), now) for digest, vec in items]
        with closing(self._connect()) as db, db:
            db.executemany("INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?, ?, ?)", rows)

    def count(self, identity: str | None = None) -> int:
        with closing(self._connect()) as db:
            if identity is None:
                total: int = db.execute("SELECT count(*) FROM embeddings").fetchone()[0]
                return total
            matching: int = db.execute("SELECT count(*) FROM embeddings WHERE identity = ?", [identity]).fetchone()[0]
            return matching


@dataclass(frozen=True)
class EmbedProgress:
    """Where a batched embedding stands; handed to the progress callback after each batch."""

    done: int
    total: int
    cache_hits: int
    requests: int
    seconds: float


@dataclass(frozen=True)
class CachedEmbedding:
    vectors: list[list[float]]
    cache_hits: int
    embedded: int
    requests: int
    seconds: float


def embed_batched(
    texts: Sequence[str],
    embed: Callable[[list[str]], list[list[float]]],
    *,
    identity: str,
    dimension: int,
    batch_size: int,
    cache: EmbeddingCache | None = None,
    progress: Callable[[EmbedProgress], None] | None = None,
) -> CachedEmbedding:
    """Embed ``texts`` (index side) in batches of ``batch_size`` through ``embed``, serving what
    the cache holds and storing what it did not; vectors come back in the order of ``texts``.

    Identical texts are embedded once. Each batch is stored as soon as it is answered, so an
    interrupted run keeps what it paid for.
    """
    started = time.perf_counter()
    digests = [text_sha256(t) for t in texts]
    known = cache.get_many(identity, digests, dimension) if cache is not None else {}
    hits = sum(1 for d in digests if d in known)
    todo = [d for d in dict.fromkeys(digests) if d not in known]
    text_of = dict(zip(digests, texts, strict=False))
    requests = 0
    done = hits
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        vectors = embed([text_of[d] for d in batch])
        requests += 1
        fresh = list(zip(batch, vectors, strict=False))
        known.update(fresh)
        if cache is not None:
            cache.put_many(identity, fresh)
        in_batch = set(batch)
        done += sum(1 for d in digests if d in in_batch)
        if progress is not None:
            progress(EmbedProgress(done, len(texts), hits, requests, time.perf_counter() - started))
    seconds = time.perf_counter() - started
    if progress is not None and requests == 0:
        progress(EmbedProgress(len(texts), len(texts), hits, 0, seconds))
    log.debug("embedded %d texts: %d from cache, %d requests, %.2fs", len(texts), hits, requests, seconds)
    return CachedEmbedding(
        vectors=[known[d] for d in digests], cache_hits=hits, embedded=len(todo), requests=requests, seconds=seconds
    )
