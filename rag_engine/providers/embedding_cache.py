"""Persistent cache of passage embeddings, and batched embedding through it.

Embedding a corpus with a neural model is the slow (or paid) part of indexing; a re-ingest of
unchanged chunks must not pay it again. Vectors are keyed by (embedder identity, sha256 of the
exact text embedded): the identity carries provider, served model, dimension and mode scheme,
so a vector is reused only where the same model would have produced it. Only the index side is
cached (passages are embedded once and again on every re-ingest); questions are not.

SQLite, one small file (``storage.embedding_cache``), opened per operation with WAL and a busy
timeout so several processes (Dagster run workers, a CLI ingest, tests) can share it.

The cache only ever saves calls, so it never fails an ingest: a stored vector that is not
usable (``vectors.vector_problem``) is a miss; a file that is not a database (or a corrupt one)
is moved aside to ``<name>.corrupt-<unix time>`` with one warning naming it, and a new cache is
started; any other SQLite failure (locked past the busy timeout, read-only disk) turns the cache
off for this process with one warning, and embedding goes on without it.
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
from typing import TypeVar

import numpy as np

from rag_engine.providers.sqlite_wal import to_wal
from rag_engine.providers.vectors import vector_problem

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
_T = TypeVar("_T")


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """(identity, sha256(text)) -> float32 vector, persisted in SQLite."""

    def __init__(self, path: str | Path, *, timeout_s: float = 30.0):
        self.path = Path(path)
        self._timeout = timeout_s
        self.bypassed: str | None = None
        """Why the cache is off for this process (None: in use)."""
        self.moved_aside: Path | None = None
        """Where a corrupt cache file was moved to, if one was."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._guarded(self._create, None)

    def __repr__(self) -> str:
        return f"EmbeddingCache({self.path.name})"

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=self._timeout)

    def _create(self) -> None:
        with closing(self._connect()) as db, db:
            to_wal(db, self._timeout)
            db.execute(_SCHEMA)

    def _guarded(self, work: Callable[[], _T], fallback: _T) -> _T:
        """``work``, or ``fallback`` once the cache is off. A corrupt file is moved aside and
        ``work`` runs once more on a new one; any other SQLite failure turns the cache off."""
        if self.bypassed is not None:
            return fallback
        try:
            return work()
        except sqlite3.OperationalError as exc:  # locked, read-only, I/O: the file may be fine
            return self._bypass(f"{type(exc).__name__}: {exc}", fallback)
        except sqlite3.DatabaseError as exc:  # "file is not a database", "disk image is malformed"
            reason = f"{type(exc).__name__}: {exc}"
        if not self._move_aside(reason):
            return fallback
        try:
            self._create()
            return work()
        except sqlite3.Error as exc:
            return self._bypass(f"{type(exc).__name__}: {exc} (after starting a new file)", fallback)

    def _bypass(self, reason: str, fallback: _T) -> _T:
        self.bypassed = reason
        log.warning("embedding cache %s is not usable (%s); embedding without it", self.path, reason)
        return fallback

    def _move_aside(self, reason: str) -> bool:
        aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
        try:
            self.path.replace(aside)
            for suffix in ("-wal", "-shm"):  # the old file's journal belongs to it, not to the new one
                self.path.with_name(self.path.name + suffix).unlink(missing_ok=True)
        except OSError as exc:
            self._bypass(f"{reason}; moving it aside failed: {exc}", None)
            return False
        self.moved_aside = aside
        log.warning("embedding cache %s is corrupt (%s); moved to %s, starting a new cache", self.path, reason, aside)
        return True

    def get_many(self, identity: str, digests: Sequence[str], dimension: int) -> dict[str, list[float]]:
        """The cached vectors among ``digests``; a row of the wrong size or an unusable vector
        (not finite, all zeros) counts as a miss, so it is embedded again and replaced."""
        return self._guarded(lambda: self._get_many(identity, digests, dimension), {})

    def _get_many(self, identity: str, digests: Sequence[str], dimension: int) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {}
        unique = list(dict.fromkeys(digests))
        refused = 0
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
                    if dim != dimension or not isinstance(blob, bytes) or len(blob) != 4 * dimension:
                        continue
                    vector = np.frombuffer(blob, dtype=np.float32).astype(float).tolist()
                    if vector_problem(vector, dimension) is not None:
                        refused += 1
                        continue
                    found[digest] = vector
        if refused:
            log.warning("embedding cache %s: %d stored vector(s) unusable, embedding them again", self.path, refused)
        return found

    def put_many(self, identity: str, items: Sequence[tuple[str, Sequence[float]]]) -> None:
        """Store vectors; an unusable one is never stored (the provider boundary refuses them first)."""
        now = time.time()
        rows = [
            (identity, digest, len(vec), np.asarray(vec, dtype=np.float32).tobytes(), now)
            for digest, vec in items
            if vector_problem(vec, None) is None
        ]
        if len(rows) < len(items):
            log.warning("embedding cache %s: %d unusable vector(s) not stored", self.path, len(items) - len(rows))

        def work() -> None:
            with closing(self._connect()) as db, db:
                db.executemany("INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?, ?, ?)", rows)

        self._guarded(work, None)

    def count(self, identity: str | None = None) -> int:
        def work() -> int:
            with closing(self._connect()) as db:
                if identity is None:
                    total: int = db.execute("SELECT count(*) FROM embeddings").fetchone()[0]
                    return total
                matching: int = db.execute("SELECT count(*) FROM embeddings WHERE identity = ?", [identity]).fetchone()[
                    0
                ]
                return matching

        return self._guarded(work, 0)


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
