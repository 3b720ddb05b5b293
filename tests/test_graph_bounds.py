"""The graph's place is bounded by construction: at any graph weight, a configured cap on
graph-only candidates in the top k holds and exact hits stay above everything the graph contributed
to; config validation refuses caps that disagree. Unit tests of the rule, then the query path on
the seed comparison's fixture (real Neo4j, the real embedder) at graph weight 10."""

from __future__ import annotations

import pytest

from evals import seed_comparison
from rag_engine.config import load_config
from rag_engine.engine import Engine
from rag_engine.errors import ConfigError
from rag_engine.graph.quality_bounds import bounded
from rag_engine.ingest.pipeline import ingest_pack
from rag_engine.retrieval.retriever import retrieve
from tests.conftest import ROOT


def _rank(items, k, cap):
    return bounded(
        items,
        k,
        cap,
        exact=lambda c: c[1] == "exact",
        graph=lambda c: "graph" in c[1],
        graph_only=lambda c: c[1] == "graph",
    )[:k]


def test_graph_only_candidates_are_capped_and_exact_hits_lead():
    ranked = [("g1", "graph"), ("gt", "graph+text"), ("g2", "graph"), ("e", "exact"), ("g3", "graph"), ("t1", "text")]
    ranked += [(f"t{i}", "text") for i in range(2, 8)]
    top = _rank(ranked, 5, 1)
    assert top[0] == ("e", "exact")  # nothing the graph contributed to above an exact hit
    assert sum(1 for c in top if c[1] == "graph") == 1
    assert [c[0] for c in top] == ["e", "g1", "gt", "t1", "t2"]
    assert sum(1 for c in _rank(ranked, 5, 0) if c[1] == "graph") == 0


def test_config_refuses_a_graph_tail_beyond_the_cap(tmp_path):
    text = (ROOT / "config" / "engine.yaml").read_text()
    bad = tmp_path / "engine.yaml"
    bad.write_text(text.replace("  graph_tail: 0 ", "  graph_tail: 5 "))
    with pytest.raises(ConfigError, match="max_graph_only_in_top_k"):
        load_config(bad)


def test_config_refuses_a_graph_only_cap_that_fills_the_top_k(tmp_path):
    """A cap of final_k or more lets graph-only candidates take every place of the top k: refused
    while the graph leg can return candidates, accepted when it is off; any weight is accepted."""
    text = (ROOT / "config" / "engine.yaml").read_text()
    cap = "  max_candidates: 100\n  max_graph_only_in_top_k: 10\n"
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("  max_candidates: 5\n", cap))
    with pytest.raises(ConfigError, match=r"max_graph_only_in_top_k 10 must be below retrieval\.final_k 10"):
        load_config(bad)
    off = tmp_path / "off.yaml"
    off.write_text(text.replace("  max_candidates: 5\n", "  max_candidates: 0\n  max_graph_only_in_top_k: 10\n"))
    assert load_config(off).traversal.max_graph_only_in_top_k == 10
    heavy = tmp_path / "heavy.yaml"
    heavy.write_text(
        text.replace("  weights: {graph: 0.5}", "  weights: {graph: 10}").replace(
            "  max_candidates: 5\n", "  max_candidates: 100\n"
        )
    )
    cfg = load_config(heavy)
    assert cfg.retrieval.weights["graph"] == 10 and cfg.traversal.max_graph_only_in_top_k == 2


def test_at_graph_weight_10_the_graph_never_takes_over(base_config, tmp_path, neo4j_driver):
    from tests.conftest import _embed_env, _neo4j_uri

    base = Engine(base_config, ROOT, {"NEO4J_URI": _neo4j_uri(), **_embed_env()})
    engine, pack = seed_comparison.fixture_engine(base, tmp_path / "seed")
    try:
        ingest_pack(engine, pack)
        for cap in (0, 1):
            cfg = engine.cfg.model_copy(
                update={
                    "roles": {"employee": ("kb_internal",)},
                    "retrieval": engine.cfg.retrieval.model_copy(update={"weights": {"graph": 10.0}}),
                    "traversal": engine.cfg.traversal.model_copy(
                        update={"max_candidates": 100, "max_graph_only_in_top_k": cap}
                    ),
                }
            )
            eng = Engine(cfg, engine.root, engine.env, packs=[pack])
            try:
                result = retrieve(eng, seed_comparison.QUESTION, "employee", k=10)
            finally:
                eng.close()
            assert result.plan["reason"] == "traverse"
            graph_only = [c for c in result.candidates if c.sources == ("graph",)]
            assert len(graph_only) <= cap, [(c.anchor, c.sources) for c in result.candidates]
    finally:
        seed_comparison.remove_fixture(engine, pack.name)
        engine.close()
        base.close()


def test_the_query_audit_record_keeps_the_plan_and_each_graph_path(base_config, tmp_path, neo4j_driver):
    """A traversal can be explained later: the audit record of the query holds the planner's
    decision and, for each graph candidate, its path and path score."""
    from rag_engine.governance.audit import audit_trail
    from rag_engine.retrieval.query import run_query
    from tests.conftest import _embed_env, _neo4j_uri

    base = Engine(base_config, ROOT, {"NEO4J_URI": _neo4j_uri(), **_embed_env()})
    engine, pack = seed_comparison.fixture_engine(base, tmp_path / "seed")
    try:
        ingest_pack(engine, pack)
        cfg = engine.cfg.model_copy(update={"roles": {"employee": ("kb_internal",)}})
        eng = Engine(cfg, engine.root, engine.env, packs=[pack])
        try:
            out = run_query(eng, seed_comparison.QUESTION, "employee", generate=False, session_id=f"s-{pack.name}")
            (record,) = audit_trail(eng).records(event="query", session_id=f"s-{pack.name}")
        finally:
            eng.close()
        assert record.payload["plan"] == {"traverse": True, "reason": "traverse"}
        graph = [c for c in record.payload["candidates"] if "path_score" in c]
        assert graph and all(c["path"] and c["path"][0]["type"] for c in graph)
        assert {c["chunk_id"]: c["path_score"] for c in graph} == {
            c.chunk_id: c.path_score for c in out.retrieval.candidates if c.path_score is not None
        }
    finally:
        seed_comparison.remove_fixture(engine, pack.name)
        engine.close()
        base.close()


def test_an_exact_hit_is_never_pushed_down_by_the_graph_at_any_weight(base_config, tmp_path, neo4j_driver):
    """The measured take-over: at graph weight 10 with max_candidates 100, graph-plus-text
    candidates moved an exact hit from rank 1 to 5. On a real store, the graph's question naming
    another document (POL-960, which the graph does not reach): for every weight from 0 to 1000 the
    exact hit ranks no lower than without the graph, nothing the graph contributed to ranks above
    it, and graph-only candidates stay within the cap."""
    from tests.conftest import _embed_env, _neo4j_uri

    base = Engine(base_config, ROOT, {"NEO4J_URI": _neo4j_uri(), **_embed_env()})
    engine, pack = seed_comparison.fixture_engine(base, tmp_path / "seed")
    question = f"{seed_comparison.QUESTION} (POL-960)"
    try:
        ingest_pack(engine, pack)
        ranks = {}
        for weight in (0.0, 1.0, 10.0, 1000.0):
            cfg = engine.cfg.model_copy(
                update={
                    "roles": {"employee": ("kb_internal",)},
                    "retrieval": engine.cfg.retrieval.model_copy(update={"weights": {"graph": weight}}),
                    "traversal": engine.cfg.traversal.model_copy(update={"max_candidates": 100}),
                }
            )
            eng = Engine(cfg, engine.root, engine.env, packs=[pack])
            try:
                result = retrieve(eng, question, "employee", k=10)
            finally:
                eng.close()
            ranked = result.candidates
            shown = [(c.anchor, c.sources, c.exact) for c in ranked]
            assert result.plan["reason"] == "traverse"
            (exact,) = [i for i, c in enumerate(ranked) if c.exact]
            assert ranked[exact].doc_id == "system-00", shown
            ranks[weight] = exact
            assert not any("graph" in c.sources for c in ranked[:exact]), (weight, shown)
            assert sum(1 for c in ranked if c.sources == ("graph",)) <= cfg.traversal.max_graph_only_in_top_k
            if weight >= 10:
                assert any("graph" in c.sources for c in ranked), (weight, shown)  # the graph did take part
        assert all(rank <= ranks[0.0] for rank in ranks.values()), ranks
    finally:
        seed_comparison.remove_fixture(engine, pack.name)
        engine.close()
        base.close()
