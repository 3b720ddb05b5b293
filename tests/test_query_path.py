"""The whole query path on the ingested packs: plan in the trace, context overflow, citations
that never leave the assembled context, feedback that never changes graph facts."""

from __future__ import annotations

import json

import pytest
import yaml

from rag_engine import DEFAULT_CONFIG
from rag_engine.engine import Engine, project_root
from rag_engine.graph.feedback import encode_path_id, record_feedback
from rag_engine.retrieval.query import run_query
from tests.support.cli import rag

RELATIONAL = "Which supervisory authority supervises the controller?"


@pytest.fixture
def graph_tail_engine(ingested_engine):
    tail = ingested_engine.cfg.retrieval.model_copy(update={"graph_tail": 2})
    eng = Engine(ingested_engine.cfg.model_copy(update={"retrieval": tail}), ingested_engine.root, ingested_engine.env)
    yield eng
    eng.close()


@pytest.fixture
def graph_tail_config(tmp_path):
    cfg = yaml.safe_load((project_root() / DEFAULT_CONFIG).read_text())
    cfg["retrieval"]["graph_tail"] = 2
    path = tmp_path / "engine.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_answer_cites_only_context_and_reports_overflow(ingested_engine):
    small = ingested_engine.cfg.context.model_copy(update={"documents": 600})
    eng = Engine(ingested_engine.cfg.model_copy(update={"context": small}), ingested_engine.root, ingested_engine.env)
    try:
        out = run_query(eng, "What is the right to erasure?", "legal_analyst")
    finally:
        eng.close()
    assert out.context.overflow, "a 600-token document budget cannot hold ten GDPR chunks"
    assert {o.category for o in out.context.overflow} == {"documents"}
    in_context = out.context.cited_ids
    assert out.answer.citations and set(out.answer.citations) <= in_context
    overflowed = {o.item_id for o in out.context.overflow}
    assert not set(out.answer.citations) & overflowed
    assert out.context.used["documents"] <= 600


def test_relational_question_traverses_and_shows_paths(graph_tail_engine):
    # the graph's place in the top k is the fitted ranking's call; graph_tail reserves it the last
    # places, so what traversal found is shown with its paths
    out = run_query(graph_tail_engine, RELATIONAL, "legal_analyst", generate=False)
    assert out.retrieval.plan["reason"] == "traverse"
    [traversal] = [s for s in out.retrieval.trace if s["step"] == "traversal"]
    assert traversal["candidates"] > 0
    graph = [c for c in out.retrieval.candidates if c.path]
    assert 0 < len(graph) <= graph_tail_engine.cfg.traversal.max_candidates
    traversal = graph_tail_engine.cfg.traversal
    for c in graph:
        assert c.path_score >= traversal.confidence_floor / traversal.max_depth
        assert all(h["confidence"] >= traversal.confidence_floor for h in c.path)


def test_exact_reference_stays_above_graph_candidates(ingested_engine):
    out = run_query(
        ingested_engine,
        "Which supervisory authority supervises the controller under Article 55(1)?",
        "legal_analyst",
        generate=False,
    )
    # not a lookup (more than the reference is asked), so the exact hit is one fused leg: near
    # the top, and never below a candidate only the graph found
    top = [c.anchor for c in out.retrieval.candidates[:3] if c.exact]
    assert top == ["gdpr-ch06#art55-p1"]
    positions = [i for i, c in enumerate(out.retrieval.candidates) if c.sources == ("graph",)]
    exact_positions = [i for i, c in enumerate(out.retrieval.candidates) if c.exact]
    assert not positions or max(exact_positions) < min(positions)


def test_feedback_is_stored_and_changes_no_fact(ingested_engine, graph_tail_engine):
    out = run_query(graph_tail_engine, RELATIONAL, "legal_analyst", generate=False)
    cand = next(c for c in out.retrieval.candidates if c.path)

    def facts():
        rows, _, _ = ingested_engine.driver.execute_query(
            "MATCH ()-[r:RELATED]->() WITH count(r) AS rel MATCH ()-[e:REFERENCES]->() "
            "WITH rel, count(e) AS refs MATCH (c:Chunk {active: true}) RETURN rel, refs, count(c) AS chunks"
        )
        return dict(rows[0])

    before = facts()
    obs = record_feedback(
        ingested_engine.driver,
        ingested_engine.database,
        path=cand.path,
        verdict="harmful",
        note="wrong authority",
        actor="reviewer@example.org",
        query=RELATIONAL,
    )
    assert obs.verdict == "harmful"
    assert facts() == before
    again = run_query(graph_tail_engine, RELATIONAL, "legal_analyst", generate=False)
    assert [c.chunk_id for c in again.retrieval.candidates] == [c.chunk_id for c in out.retrieval.candidates]
    assert encode_path_id(cand.path)


def test_cli_query_shows_plan_paths_and_citations(ingested_engine, graph_tail_config, capsys):
    res = rag("--config", graph_tail_config, "query", RELATIONAL, "--role", "legal_analyst", "--no-generate")
    assert res.exit_code == 0, res.stderr
    text = res.stdout
    assert "plan: traverse" in text and "path (score" in text and "citations: " in text
    res = rag("--config", graph_tail_config, "query", RELATIONAL, "--role", "legal_analyst", "--json", "--no-generate")
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["retrieval"]["plan"]["reason"] == "traverse"
    assert set(data["answer"]["citations"]) <= {d["chunk_id"] for d in data["context"]["documents"]}
