"""Store epochs, and the per-process caches they key.

Two facts the query path needs on every question change only when something writes:

* the active vector index (embedder identity, index name, property). It changes when the first
  index is created (``schema.ensure_vector_index``) or a re-index switches over
  (``reindex._switch``); both give ``(:IndexMeta).epoch`` a fresh token in the same write.
* whether any retrieval-eligible inferred edge is visible to a caller's packs and collections.
  It changes when a graph write adds or rewrites edges, or (de)activates or moves chunks; those
  writes bump ``(:StoreEpoch {name: 'graph'}).epoch`` in their own transaction
  (``bump_graph_epoch``).

A question reads both epochs once, in its own read transaction (``store_state``), and uses the
process's cached value only if it was computed under the same epochs; otherwise it reads the
store and caches that. A store without epochs (written before they existed) is never cached.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import neo4j

from rag_engine.errors import EmbedderMismatch
from rag_engine.store.names import EMBEDDING_PROPERTY, GRAPH_EPOCH, VECTOR_INDEX
from rag_engine.store.session import Reads

BUMP_GRAPH_EPOCH = "MERGE (g:StoreEpoch {name: $name}) SET g.epoch = coalesce(g.epoch, 0) + 1"

_STATE = (
    "OPTIONAL MATCH (m:IndexMeta {name: $meta}) OPTIONAL MATCH (g:StoreEpoch {name: $graph}) "
    "RETURN m IS NOT NULL AS indexed, m.epoch AS index_epoch, g.epoch AS graph_epoch"
)
_ACTIVE_INDEX = (
    "MATCH (m:IndexMeta {name: $meta}) RETURN m.epoch AS epoch, m.identity AS identity, "
    "coalesce(m.index, $index) AS index, coalesce(m.property, $property) AS property"
)
_ELIGIBLE_EDGES = (
    "RETURN EXISTS { MATCH (:Entity)-[r:RELATED]->(:Entity) WHERE r.pack IN $packs AND r.retrieval_eligible "
    "AND r.confidence >= $floor AND EXISTS { MATCH (ev:Chunk {chunk_id: r.chunk_id}) "
    "WHERE ev.active AND ev.collection IN $collections } } AS any"
)


def bump_graph_epoch(tx: neo4j.ManagedTransaction) -> None:
    """Run last in a graph write's transaction: cached graph facts of every process expire with it."""
    tx.run(BUMP_GRAPH_EPOCH, name=GRAPH_EPOCH).consume()


@dataclass(frozen=True)
class StoreState:
    indexed: bool
    index_epoch: str | None
    graph_epoch: int | None


@dataclass(frozen=True)
class ActiveIndex:
    identity: str
    index: str
    property: str


@dataclass
class _Caches:
    lock: threading.Lock = field(default_factory=threading.Lock)
    index: dict[str, tuple[str, ActiveIndex]] = field(default_factory=dict)
    """database -> (index epoch, active index)"""
    edges: dict[str, tuple[int, dict[tuple[tuple[str, ...], tuple[str, ...], float], bool]]] = field(
        default_factory=dict
    )
    """database -> (graph epoch, {(packs, collections, floor): any eligible edge})"""


_caches: weakref.WeakKeyDictionary[neo4j.Driver, _Caches] = weakref.WeakKeyDictionary()
_caches_guard = threading.Lock()


def _of(rx: Reads) -> _Caches:
    with _caches_guard:
        return _caches.setdefault(rx.driver, _Caches())


STATE_COLUMNS = (
    "OPTIONAL MATCH (m:IndexMeta {name: $meta}) OPTIONAL MATCH (g:StoreEpoch {name: $graph}) "
    "WITH m IS NOT NULL AS indexed, m.epoch AS index_epoch, g.epoch AS graph_epoch"
)
"""The head of a statement that reads both epochs along with whatever follows it (``reads.legs``):
its rows carry ``indexed``, ``index_epoch`` and ``graph_epoch``; pass ``STATE_PARAMS``."""
STATE_PARAMS = {"meta": VECTOR_INDEX, "graph": GRAPH_EPOCH}


def remember_state(rx: Reads, row: dict[str, Any]) -> StoreState:
    """The epochs a statement read (``STATE_COLUMNS``), kept for the rest of the question."""
    rx.memo["state"] = StoreState(
        indexed=bool(row["indexed"]), index_epoch=row["index_epoch"], graph_epoch=row["graph_epoch"]
    )
    state: StoreState = rx.memo["state"]
    return state


def store_state(rx: Reads) -> StoreState:
    """Both epochs, read once per question (or taken from a statement that read them)."""
    if "state" not in rx.memo:
        return remember_state(rx, rx.rows(_STATE, **STATE_PARAMS)[0])
    state: StoreState = rx.memo["state"]
    return state


def cached_index(rx: Reads, identity: str) -> tuple[str, ActiveIndex] | None:
    """(epoch, active index) this process cached, if it was built by ``identity``. Unchecked: the
    statement that uses it must compare the epoch in the store with this one (``reads.legs`` does,
    in the same statement) and fall back to ``active_index`` when they differ."""
    with _of(rx).lock:
        hit = _of(rx).index.get(rx.database)
    return hit if hit is not None and hit[1].identity == identity else None


def active_index(rx: Reads, identity: str) -> tuple[ActiveIndex, bool]:
    """(the active vector index, whether it came from this process's cache), after checking that
    it was built by ``identity``: a query vector is never compared in another embedder's space."""
    active, cached = current_index(rx)
    if active.identity != identity:
        raise EmbedderMismatch(
            f"index built with {active.identity!r}, query uses {identity!r}: "
            f"a full re-index is required (`rag reindex`)"
        )
    rx.memo["index_cached"] = cached
    return active, cached


def current_index(rx: Reads) -> tuple[ActiveIndex, bool]:
    """(the active vector index whoever built it, whether it came from this process's cache);
    ``EmbedderMismatch`` when there is none yet. The query service follows it to the embedder
    that built it (``serving.follow``)."""
    state = store_state(rx)
    if not state.indexed:
        raise EmbedderMismatch("no chunk index exists yet: materialize chunk_index first")
    caches = _of(rx)
    with caches.lock:
        hit = caches.index.get(rx.database)
    cached = hit is not None and state.index_epoch is not None and hit[0] == state.index_epoch
    if hit is not None and cached:
        active = hit[1]
    else:
        rows = rx.rows(_ACTIVE_INDEX, meta=VECTOR_INDEX, index=VECTOR_INDEX, property=EMBEDDING_PROPERTY)
        if not rows:  # reset between the two reads (transactions are read-committed)
            raise EmbedderMismatch("no chunk index exists yet: materialize chunk_index first")
        epoch = rows[0].pop("epoch")
        active = ActiveIndex(**rows[0])
        if epoch is not None:  # keyed by the epoch read with it: a switch in between cannot mislabel it
            with caches.lock:
                caches.index[rx.database] = (epoch, active)
    return active, cached


def any_eligible_edge(rx: Reads, packs: list[str], collections: tuple[str, ...], floor: float) -> tuple[bool, bool]:
    """(whether a retrieval-eligible inferred edge of ``packs`` at or above ``floor`` is evidenced
    by a current chunk of ``collections``, whether it came from this process's cache)."""
    state = store_state(rx)
    key = (tuple(sorted(packs)), tuple(sorted(collections)), float(floor))
    caches = _of(rx)
    if state.graph_epoch is not None:
        with caches.lock:
            hit = caches.edges.get(rx.database)
            if hit is not None and hit[0] == state.graph_epoch and key in hit[1]:
                rx.memo["edges_cached"] = True
                return hit[1][key], True
    rows = rx.rows(_ELIGIBLE_EDGES, packs=list(key[0]), collections=list(key[1]), floor=key[2])
    found = bool(rows[0]["any"])
    if state.graph_epoch is not None:
        with caches.lock:
            epoch, known = caches.edges.get(rx.database, (state.graph_epoch, {}))
            if epoch != state.graph_epoch:  # an older epoch's facts are dropped, never kept around
                known = {}
            known[key] = found
            caches.edges[rx.database] = (state.graph_epoch, known)
    rx.memo["edges_cached"] = False
    return found, False
