"""Diagnostic feedback on graph paths: "this path was useful / harmful" as an Observation.

Feedback is diagnostic only. Traversal does not read observations, and this module can only
add: it CREATEs one ``(:Observation)`` node plus ``[:OBSERVES]`` edges to the path's Entity
nodes and ``[:ABOUT_CHUNK]`` edges to its evidence chunks. It never deletes or edits a graph
fact, a REFERENCES edge, a chunk or a citation, so a wrong or malicious verdict cannot change
what the engine retrieves or cites; people act on the summary (fix the pack, re-extract), not
the traversal. All Cypher is constant text with parameters (``store.feedback``).

A path is a list of hops ``{source_id, target_id, type, chunk_id}`` (the Entity ids, the
relationship type and the evidence chunk); extra hop keys such as ``confidence`` are ignored.
``encode_path_id`` gives a reversible, printable encoding of those hops (a CLI can print one and
take it back), and ``path_signature`` a short hash of the same canonical form, for grouping.

Feedback is given as a role: a node the role may not read (an evidence chunk outside its
collections, an entity mentioned only in such chunks) counts as missing, so a path naming an
internal chunk gets exactly the error of a path naming no chunk at all, and nobody learns which
internal chunks exist by probing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from collections.abc import Sequence
from typing import Any, Literal, TypeGuard

import neo4j
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from rag_engine.errors import FeedbackError
from rag_engine.store import feedback as observations

Verdict = Literal["useful", "harmful"]
VERDICTS: tuple[str, ...] = ("useful", "harmful")


def _is_verdict(verdict: str) -> TypeGuard[Verdict]:
    return verdict in VERDICTS


class PathHop(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    source_id: str = Field(  # type: ignore[pydantic-alias]  # several input names (by validation)
        min_length=1, validation_alias=AliasChoices("source_id", "source", "from_id")
    )
    target_id: str = Field(  # type: ignore[pydantic-alias]  # several input names (by validation)
        min_length=1, validation_alias=AliasChoices("target_id", "target", "to_id")
    )
    type: str = Field(min_length=1)
    chunk_id: str = Field(  # type: ignore[pydantic-alias]  # several input names (by validation)
        min_length=1, validation_alias=AliasChoices("chunk_id", "evidence_chunk_id")
    )


class Observation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    observation_id: str
    verdict: Verdict
    path_signature: str
    path_id: str
    entities: int  # OBSERVES edges created
    chunks: int  # ABOUT_CHUNK edges created
    created_at: str


def _canonical(hops: Sequence[PathHop]) -> str:
    return json.dumps([[h.source_id, h.type, h.target_id, h.chunk_id] for h in hops], separators=(",", ":"))


def hops_of(path: Sequence[dict[str, Any] | PathHop]) -> tuple[PathHop, ...]:
    if not path:
        raise FeedbackError("a path needs at least one hop")
    try:
        return tuple(h if isinstance(h, PathHop) else PathHop.model_validate(h) for h in path)
    except ValidationError as exc:
        raise FeedbackError(
            f"invalid path hop ({exc.error_count()} error(s)): needs source_id, target_id, type, chunk_id"
        ) from None


def _encode(hops: Sequence[PathHop]) -> str:
    return base64.urlsafe_b64encode(_canonical(hops).encode()).decode().rstrip("=")


def _signature(hops: Sequence[PathHop]) -> str:
    return hashlib.sha256(_canonical(hops).encode()).hexdigest()[:16]


def encode_path_id(path: Sequence[dict[str, Any] | PathHop]) -> str:
    return _encode(hops_of(path))


def path_signature(path: Sequence[dict[str, Any] | PathHop]) -> str:
    return _signature(hops_of(path))


def decode_path_id(value: str) -> tuple[PathHop, ...]:
    try:
        raw = json.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
    except (ValueError, binascii.Error):
        raw = None
    if not isinstance(raw, list) or not all(isinstance(h, list) and len(h) == 4 for h in raw):
        raise FeedbackError("path_id is not a path id produced by encode_path_id()")
    return hops_of([dict(zip(("source_id", "type", "target_id", "chunk_id"), hop, strict=False)) for hop in raw])


def record_feedback(
    driver: neo4j.Driver,
    database: str,
    *,
    verdict: str,
    actor: str,
    query: str,
    note: str = "",
    path: Sequence[dict[str, Any] | PathHop] | None = None,
    path_id: str | None = None,
    collections: Sequence[str] | None = None,
) -> Observation:
    """Store one observation about a path; refuses (writing nothing) if any path node is unknown.

    ``collections``: what the caller's role may read (``policy.gate``); nodes outside them are
    unknown to this caller. None (trusted in-process callers only) checks existence alone."""
    if not _is_verdict(verdict):
        raise FeedbackError(f"verdict must be one of {list(VERDICTS)}, got {verdict!r}")
    if not actor.strip():
        raise FeedbackError("feedback needs an actor")
    if (path is None) == (path_id is None):
        raise FeedbackError("give exactly one of path or path_id")
    hops = hops_of(path) if path is not None else decode_path_id(path_id)  # type: ignore[arg-type]
    entity_ids = list(dict.fromkeys(i for h in hops for i in (h.source_id, h.target_id)))
    chunk_ids = list(dict.fromkeys(h.chunk_id for h in hops))
    params = {
        "observation_id": uuid.uuid4().hex,
        "verdict": verdict,
        "note": note,
        "actor": actor,
        "query_hash": hashlib.sha256(query.encode()).hexdigest()[:16],
        "signature": _signature(hops),
        "path_id": _encode(hops),
    }

    def work(tx: neo4j.ManagedTransaction) -> Observation:
        entities, chunks = observations.found_nodes(
            tx, entity_ids=entity_ids, chunk_ids=chunk_ids, collections=collections
        )
        missing = (set(entity_ids) - entities) | (set(chunk_ids) - chunks)
        if missing:
            raise FeedbackError(f"path refers to {len(missing)} node(s) the graph does not hold")
        created_at = observations.create_observation(tx, params)
        n_entities, n_chunks = observations.observe(
            tx, observation_id=params["observation_id"], entity_ids=entity_ids, chunk_ids=chunk_ids
        )
        return Observation(
            observation_id=params["observation_id"],
            verdict=verdict,
            path_signature=params["signature"],
            path_id=params["path_id"],
            entities=n_entities,
            chunks=n_chunks,
            created_at=created_at,
        )

    with driver.session(database=database) as session:
        return session.execute_write(work)


def feedback_summary(driver: neo4j.Driver, database: str, *, limit: int | None = 50) -> dict[str, Any]:
    """Counts per verdict and per path (most harmful first), read through a read-access session."""
    rows = observations.feedback_rows(driver, database)
    paths = [
        {"path_signature": r["signature"], "path_id": r["path_id"], "useful": r["useful"], "harmful": r["harmful"]}
        for r in rows
    ]
    return {
        "observations": sum(p["useful"] + p["harmful"] for p in paths),
        "by_verdict": {"useful": sum(p["useful"] for p in paths), "harmful": sum(p["harmful"] for p in paths)},
        "paths": paths if limit is None else paths[:limit],
    }
