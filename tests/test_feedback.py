"""Path feedback on the real Neo4j: observations are added, graph facts are never touched."""

from __future__ import annotations

import json
import re

import neo4j
import pytest

from rag_engine.errors import FeedbackError
from rag_engine.graph.feedback import decode_path_id, encode_path_id, feedback_summary, path_signature, record_feedback
from rag_engine.store import feedback as feedback_cypher

DB = "neo4j"

_SETUP = """
CREATE (c1:Chunk {chunk_id: $p + '-ch1', text: 'Clause 1 amends clause 7.', collection: 'public', active: true})
CREATE (c2:Chunk {chunk_id: $p + '-ch2', text: 'Clause 7 sets the notice period.', collection: 'public',
                  active: true})
CREATE (c1)-[:REFERENCES {source_type: 'deterministic_reference', ref_type: 'clause', raw: 'clause 7',
                          normalized: 'clause:7', resolved: true}]->(c2)
CREATE (e1:Entity {entity_id: $p + '-e1', name: 'Clause 1', normalized_name: 'clause 1', type: 'Clause'})
CREATE (e2:Entity {entity_id: $p + '-e2', name: 'Clause 7', normalized_name: 'clause 7', type: 'Clause'})
CREATE (e3:Entity {entity_id: $p + '-e3', name: 'Notice period', normalized_name: 'notice period', type: 'Term'})
CREATE (e1)-[:MENTIONED_IN {chunk_id: $p + '-ch1'}]->(c1)
CREATE (e2)-[:MENTIONED_IN {chunk_id: $p + '-ch2'}]->(c2)
CREATE (e1)-[:RELATED {type: 'AMENDS', confidence: 0.9, retrieval_eligible: true, chunk_id: $p + '-ch1',
                       source_type: 'llm_inferred_graph'}]->(e2)
CREATE (e2)-[:RELATED {type: 'DEFINES', confidence: 0.8, retrieval_eligible: true, chunk_id: $p + '-ch2',
                       source_type: 'llm_inferred_graph'}]->(e3)
"""

# Every node and edge of the test's own graph (both ends carry the prefix), with all properties.
_SNAPSHOT = """
MATCH (n) WHERE n.entity_id STARTS WITH $p OR n.chunk_id STARTS WITH $p
OPTIONAL MATCH (n)-[r]->(m) WHERE m.entity_id STARTS WITH $p OR m.chunk_id STARTS WITH $p
RETURN labels(n) AS labels, properties(n) AS props, type(r) AS rel, properties(r) AS rel_props,
       coalesce(m.entity_id, m.chunk_id) AS target
"""


@pytest.fixture
def graph(neo4j_driver: neo4j.Driver, unique: str):
    neo4j_driver.execute_query(_SETUP, p=unique, database_=DB)
    yield unique
    neo4j_driver.execute_query(
        "MATCH (n) WHERE n.entity_id STARTS WITH $p OR n.chunk_id STARTS WITH $p DETACH DELETE n",
        p=unique,
        database_=DB,
    )
    neo4j_driver.execute_query(
        "MATCH (o:Observation) WHERE o.actor STARTS WITH $p DETACH DELETE o", p=unique, database_=DB
    )


def snapshot(driver: neo4j.Driver, prefix: str) -> list[str]:
    records, _, _ = driver.execute_query(_SNAPSHOT, p=prefix, database_=DB)
    return sorted(json.dumps(r.data(), sort_keys=True, default=str) for r in records)


def observations(driver: neo4j.Driver, actor: str) -> list[dict]:
    records, _, _ = driver.execute_query(
        "MATCH (o:Observation {actor: $actor}) "
        "OPTIONAL MATCH (o)-[:OBSERVES]->(e:Entity) WITH o, collect(e.entity_id) AS entities "
        "OPTIONAL MATCH (o)-[:ABOUT_CHUNK]->(c:Chunk) "
        "RETURN properties(o) AS o, entities, collect(c.chunk_id) AS chunks",
        actor=actor,
        database_=DB,
    )
    return [r.data() for r in records]


def path(p: str) -> list[dict]:
    return [
        {"source_id": f"{p}-e1", "target_id": f"{p}-e2", "type": "AMENDS", "confidence": 0.9, "chunk_id": f"{p}-ch1"},
        {"source_id": f"{p}-e2", "target_id": f"{p}-e3", "type": "DEFINES", "confidence": 0.8, "chunk_id": f"{p}-ch2"},
    ]


def test_harmful_feedback_adds_an_observation_and_changes_no_fact(neo4j_driver, graph) -> None:
    before = snapshot(neo4j_driver, graph)
    assert sum('"rel": "RELATED"' in row for row in before) == 2
    assert sum('"rel": "REFERENCES"' in row for row in before) == 1

    obs = record_feedback(
        neo4j_driver,
        DB,
        path=path(graph),
        verdict="harmful",
        note="wrong amendment",
        actor=f"{graph}-analyst",
        query="what amends clause 7?",
    )

    assert snapshot(neo4j_driver, graph) == before  # nodes, edges and every property intact
    assert (obs.verdict, obs.entities, obs.chunks) == ("harmful", 3, 2)
    [stored] = observations(neo4j_driver, f"{graph}-analyst")
    assert sorted(stored["entities"]) == [f"{graph}-e1", f"{graph}-e2", f"{graph}-e3"]
    assert sorted(stored["chunks"]) == [f"{graph}-ch1", f"{graph}-ch2"]
    props = stored["o"]
    assert props["observation_id"] == obs.observation_id and props["verdict"] == "harmful"
    assert props["note"] == "wrong amendment" and props["path_signature"] == path_signature(path(graph))
    assert props["created_at"] is not None
    assert "clause 7" not in props["query_hash"] and len(props["query_hash"]) == 16  # the query is hashed


def test_invalid_verdict_is_rejected_and_nothing_is_written(neo4j_driver, graph) -> None:
    before = snapshot(neo4j_driver, graph)
    for verdict in ("delete", "HARMFUL", ""):
        with pytest.raises(FeedbackError, match="verdict"):
            record_feedback(neo4j_driver, DB, path=path(graph), verdict=verdict, actor=f"{graph}-x", query="q")
    assert observations(neo4j_driver, f"{graph}-x") == []
    assert snapshot(neo4j_driver, graph) == before


@pytest.mark.parametrize(
    "bad",
    [
        lambda p: [{"source_id": f"{p}-e1", "target_id": f"{p}-nope", "type": "AMENDS", "chunk_id": f"{p}-ch1"}],
        lambda p: [{"source_id": f"{p}-e1", "target_id": f"{p}-e2", "type": "AMENDS", "chunk_id": f"{p}-gone"}],
        lambda p: [{"source_id": f"{p}-e1", "type": "AMENDS"}],
        lambda p: [],
    ],
    ids=["unknown-entity", "unknown-chunk", "incomplete-hop", "empty"],
)
def test_paths_the_graph_does_not_hold_are_rejected(neo4j_driver, graph, bad) -> None:
    with pytest.raises(FeedbackError):
        record_feedback(neo4j_driver, DB, path=bad(graph), verdict="useful", actor=f"{graph}-y", query="q")
    assert observations(neo4j_driver, f"{graph}-y") == []


def test_path_id_round_trip_and_summary(neo4j_driver, graph) -> None:
    hops = path(graph)
    pid = encode_path_id(hops)
    assert [h.model_dump() for h in decode_path_id(pid)] == [
        {k: h[k] for k in ("source_id", "target_id", "type", "chunk_id")} for h in hops
    ]
    aliased = [
        {"source": h["source_id"], "target": h["target_id"], "type": h["type"], "evidence_chunk_id": h["chunk_id"]}
        for h in hops
    ]
    assert encode_path_id(aliased) == pid

    first = record_feedback(neo4j_driver, DB, path_id=pid, verdict="useful", actor=f"{graph}-a", query="q")
    second = record_feedback(neo4j_driver, DB, path=hops, verdict="harmful", actor=f"{graph}-b", query="q")
    assert first.path_signature == second.path_signature and first.path_id == pid
    assert first.observation_id != second.observation_id  # observations accumulate, never overwrite

    summary = feedback_summary(neo4j_driver, DB, limit=None)
    [row] = [r for r in summary["paths"] if r["path_signature"] == first.path_signature]
    assert (row["useful"], row["harmful"], row["path_id"]) == (1, 1, pid)
    assert summary["observations"] == summary["by_verdict"]["useful"] + summary["by_verdict"]["harmful"] >= 2

    with pytest.raises(FeedbackError):
        record_feedback(neo4j_driver, DB, path_id="not-a-path", verdict="useful", actor=f"{graph}-c", query="q")
    with pytest.raises(FeedbackError):
        record_feedback(neo4j_driver, DB, path=hops, path_id=pid, verdict="useful", actor=f"{graph}-c", query="q")


def test_module_cypher_only_creates() -> None:
    """The guarantee in the docstring, checked on the statements themselves (in the store)."""
    statements = [
        v
        for k, v in vars(feedback_cypher).items()
        if k.startswith("_") and isinstance(v, str) and re.search(r"\b(MATCH|CREATE)\b", v)
    ]
    assert len(statements) >= 5
    for stmt in statements:
        assert not re.search(r"\b(DELETE|DETACH|REMOVE|SET|MERGE|LOAD|CALL)\b", stmt, re.IGNORECASE), stmt
