"""Item 15: ``rag feedback`` takes a role; a path the role may not read gets the same error as
a path that does not exist.

The probe: without a role, "path refers to 1 node(s) the graph does not hold" versus success told
anyone which internal chunks exist.
"""

from __future__ import annotations

import pytest

from rag_engine.errors import FeedbackError
from rag_engine.graph.feedback import encode_path_id, record_feedback
from tests.conftest import ROOT
from tests.support.cli import rag

CONFIG = str(ROOT / "config" / "engine.yaml")

_SETUP = """
CREATE (ci:Chunk {chunk_id: $p + ':internal#1', pack: $p, text: 'Payroll runs on the 25th.', collection: 'kb_internal',
                  active: true})
CREATE (cp:Chunk {chunk_id: $p + ':public#1', pack: $p, text: 'The office opens at 9.', collection: 'kb_public',
                  active: true})
CREATE (a:Entity {entity_id: $p + '-payroll', pack: $p, name: 'Payroll', normalized_name: 'payroll', type: 'process'})
CREATE (b:Entity {entity_id: $p + '-finance', pack: $p, name: 'Finance', normalized_name: 'finance', type: 'team'})
CREATE (c:Entity {entity_id: $p + '-office', pack: $p, name: 'Office', normalized_name: 'office', type: 'system'})
CREATE (d:Entity {entity_id: $p + '-reception', pack: $p, name: 'Reception', normalized_name: 'reception',
                  type: 'team'})
CREATE (a)-[:MENTIONED_IN {chunk_id: ci.chunk_id}]->(ci)
CREATE (b)-[:MENTIONED_IN {chunk_id: ci.chunk_id}]->(ci)
CREATE (c)-[:MENTIONED_IN {chunk_id: cp.chunk_id}]->(cp)
CREATE (d)-[:MENTIONED_IN {chunk_id: cp.chunk_id}]->(cp)
CREATE (b)-[:RELATED {type: 'owns', confidence: 0.9, retrieval_eligible: true, chunk_id: ci.chunk_id, pack: $p}]->(a)
CREATE (d)-[:RELATED {type: 'owns', confidence: 0.9, retrieval_eligible: true, chunk_id: cp.chunk_id, pack: $p}]->(c)
"""


@pytest.fixture
def graph(neo4j_driver, unique):
    neo4j_driver.execute_query(_SETUP, p=unique)
    yield unique
    neo4j_driver.execute_query("MATCH (n) WHERE n.pack = $p DETACH DELETE n", p=unique)
    neo4j_driver.execute_query("MATCH (o:Observation) WHERE o.actor STARTS WITH $p DETACH DELETE o", p=unique)


def hop(p: str, src: str, dst: str, chunk: str) -> dict:
    return {"source_id": f"{p}-{src}", "target_id": f"{p}-{dst}", "type": "owns", "chunk_id": f"{p}:{chunk}"}


def _feedback(capsys, path_id: str, role: str, actor: str) -> tuple[int, str]:
    res = rag(
        "--config", CONFIG, "feedback", "--path-id", path_id, "--role", role, "--verdict", "harmful", "--actor", actor
    )
    return res.exit_code, res.stderr


def test_a_path_the_role_may_not_read_looks_exactly_like_an_unknown_path(graph, capsys):
    internal = encode_path_id([hop(graph, "finance", "payroll", "internal#1")])
    unknown = encode_path_id([hop(graph, "ghost1", "ghost2", "nowhere#1")])
    public = encode_path_id([hop(graph, "reception", "office", "public#1")])

    code_internal, err_internal = _feedback(capsys, internal, "public", f"{graph}-a")
    code_unknown, err_unknown = _feedback(capsys, unknown, "public", f"{graph}-a")
    assert code_internal == code_unknown == 2
    assert "FeedbackError" in err_internal
    assert err_internal == err_unknown  # nothing tells an internal chunk from a missing one

    assert _feedback(capsys, public, "public", f"{graph}-b")[0] == 0  # what the role reads can be judged
    assert _feedback(capsys, internal, "employee", f"{graph}-c")[0] == 0  # the internal path, by a reader


def test_feedback_without_a_role_is_refused_by_the_cli(graph, capsys):
    res = rag("--config", CONFIG, "feedback", "--path-id", "x", "--verdict", "useful", "--actor", "a")
    assert res.exit_code == 2
    assert "--role" in res.stderr


def test_an_unknown_role_is_an_input_error(graph, capsys):
    public = encode_path_id([hop(graph, "reception", "office", "public#1")])
    code, err = _feedback(capsys, public, "no_such_role", f"{graph}-d")
    assert code == 2 and "PolicyError" in err


def test_the_engine_api_checks_the_collections_it_is_given(neo4j_driver, graph):
    internal = [hop(graph, "finance", "payroll", "internal#1")]
    with pytest.raises(FeedbackError, match="does not hold"):
        record_feedback(
            neo4j_driver,
            "neo4j",
            path=internal,
            verdict="useful",
            actor=f"{graph}-e",
            query="q",
            collections=("kb_public",),
        )
    obs = record_feedback(
        neo4j_driver,
        "neo4j",
        path=internal,
        verdict="useful",
        actor=f"{graph}-e",
        query="q",
        collections=("kb_public", "kb_internal"),
    )
    assert obs.entities == 2 and obs.chunks == 1
