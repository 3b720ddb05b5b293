"""Baseline retrieval on the ingested packs: policy gate, exact references, fusion, expansion."""

from __future__ import annotations

import json

import neo4j
import pytest

from rag_engine.engine import Engine
from rag_engine.errors import EmbedderMismatch, PolicyError
from rag_engine.retrieval.retriever import retrieve
from rag_engine.store import reads, session
from tests.support.cli import rag

QUERIES = [
    "password rotation and laptop encryption",
    "how are expenses approved",
    "right to erasure of personal data",
    "incident response escalation on call",
    "data retention period",
]


@pytest.mark.parametrize("role", ["public", "employee", "legal_analyst"])
def test_role_gate_never_returns_a_forbidden_collection(ingested_engine, role):
    allowed = set(ingested_engine.cfg.roles[role])
    seen = set()
    for q in QUERIES:
        result = retrieve(ingested_engine, q, role, k=20)
        seen |= {c.collection for c in result.candidates}
        assert {c.collection for c in result.candidates} <= allowed, q
    assert seen  # the queries do retrieve something for every role
    if role == "employee":
        assert "kb_internal" in seen  # the gate is not simply blocking everything internal


def test_requested_but_forbidden_collection_is_a_governance_event(ingested_engine):
    result = retrieve(ingested_engine, "expense approval", "public", collections=["kb_public", "kb_internal"])
    assert result.collections == ("kb_public",)
    assert result.events == [{"event": "collections_blocked", "role": "public", "blocked": ["kb_internal"]}]
    assert all(c.collection == "kb_public" for c in result.candidates)


def test_unknown_role_is_refused(ingested_engine):
    with pytest.raises(PolicyError, match="unknown role"):
        retrieve(ingested_engine, "anything", "intruder")


def test_exact_reference_in_question_ranks_that_chunk_first(ingested_engine):
    result = retrieve(ingested_engine, "What does Article 17(1) require?", "legal_analyst")
    first = result.candidates[0]
    assert first.exact and first.anchor == "gdpr-ch03#art17-p1"
    assert first.chunk_id.startswith("legal_regulatory:gdpr-ch03--")


def test_semantic_question_finds_the_article(ingested_engine):
    result = retrieve(ingested_engine, "right to erasure ('right to be forgotten')", "legal_analyst", k=5)
    assert "gdpr-ch03#art17-p1" in [c.anchor for c in result.candidates]
    assert {"lexical", "dense"} & set(result.candidates[0].sources)
    steps = [s["step"] for s in result.trace]
    # the graph leg (planner, then traversal when it may run) comes before fusion: it is fused by rank
    assert steps[:6] == ["policy_gate", "exact_references", "lexical", "dense", "live", "planner"]
    assert steps[-3:] == ["fusion", "rerank", "reference_expansion"]


def test_reference_expansion_adds_cited_chunks(ingested_engine):
    result = retrieve(
        ingested_engine,
        "restrictions of the rights of data subjects by Union or Member State law",
        "legal_analyst",
        k=5,
    )
    expanded = result.expansions
    assert expanded, [c.anchor for c in result.candidates]
    assert all(c.via and "<-" in c.via and c.sources == ("reference",) for c in expanded)
    # reported apart: the top k stays the fused top k, never pushed out by an expansion
    assert len(result.candidates) <= 5
    assert not {c.chunk_id for c in expanded} & {c.chunk_id for c in result.candidates}


def test_query_with_another_embedder_demands_reindex(ingested_engine, tmp_path):
    cfg = ingested_engine.cfg
    other_model = "hash-embed-384" if cfg.defaults.embedding_model != "hash-embed-384" else "e5-small"
    defaults = cfg.defaults.model_copy(update={"embedding_model": other_model})
    other = Engine(cfg.model_copy(update={"defaults": defaults}), ingested_engine.root, ingested_engine.env)
    try:  # the check runs in the vector query's transaction, so the dense leg must be on
        with pytest.raises(EmbedderMismatch, match="re-index"):
            retrieve(other, "right to erasure", "legal_analyst", weights={"dense": 1.0})
    finally:
        other.close()


def test_query_path_sessions_are_read_only(ingested_engine):
    with pytest.raises(neo4j.exceptions.ClientError):
        session.read(ingested_engine.driver, ingested_engine.database, "CREATE (:Intruder {x: 1})")
    with (
        pytest.raises(neo4j.exceptions.ClientError),
        session.read_transaction(ingested_engine.driver, ingested_engine.database, packs=ingested_engine.packs) as rx,
    ):
        rx.rows("CREATE (:Intruder {x: 1})")
    rows = session.read(ingested_engine.driver, ingested_engine.database, "MATCH (n:Intruder) RETURN count(n) AS n")
    assert rows == [{"n": 0}]


def test_lucene_syntax_in_questions_is_inert(ingested_engine):
    result = retrieve(ingested_engine, 'erasure AND "forgotten" OR title:(x) [1 TO 2] \\', "legal_analyst")
    assert result.candidates  # no parse error, still retrieves


def test_cli_query_json(ingested_engine):
    res = rag("query", "right to erasure", "--role", "legal_analyst", "--json", "-k", "3", "--no-generate")
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)["retrieval"]
    assert out["role"] == "legal_analyst" and len(out["candidates"]) >= 3
    assert all(c["chunk_id"] and c["collection"] == "legal_public" for c in out["candidates"])


def test_cli_reports_typed_errors():
    res = rag("query", "x", "--role", "intruder")
    assert res.exit_code == 2
    assert "PolicyError" in res.stderr


def test_small_collection_still_gets_k_dense_hits(ingested_engine):
    """kb_public is a few dozen chunks among ~700: the unfiltered index must be over-fetched
    until the permitted nearest neighbours are found."""
    vec = ingested_engine.embed_texts(["right to erasure of personal data"], purpose="test")[0]
    with session.read_transaction(ingested_engine.driver, ingested_engine.database, packs=ingested_engine.packs) as rx:
        rows = reads.vector(rx, vec, ("kb_public",), 20, ingested_engine.embedder_identity)
    total, _, _ = ingested_engine.driver.execute_query(
        "MATCH (c:Chunk {active: true, collection: 'kb_public'}) RETURN count(c) AS n"
    )
    assert len(rows) == min(20, total[0]["n"]) and all(r["collection"] == "kb_public" for r in rows)


@pytest.mark.parametrize(
    "question", ["Is it?", "???", "AND [", "Что такое персональные данные?", "個人データとは何ですか"]
)
def test_questions_without_indexable_words_skip_the_dense_leg(ingested_engine, question):
    result = retrieve(ingested_engine, question, "legal_analyst")
    dense = next(s for s in result.trace if s["step"] == "dense")
    if ingested_engine.registry.embedding.provider.kind == "local_hash":  # no word it can hash
        assert dense == {**dense, "skipped": "zero_vector", "hits": 0}


def test_a_long_question_is_capped_not_a_lucene_error(ingested_engine):
    """Item 4: more distinct words than Lucene's 1,024 clauses, within max_question_chars (the
    probe's TooManyClauses); the fulltext query keeps the first MAX_QUERY_TERMS of them."""
    import string

    from rag_engine.store.reads import MAX_QUERY_TERMS, lucene_escape

    letters, digits = string.ascii_lowercase, string.digits
    words = [a + b for a in letters for b in letters] + [a + d for a in letters for d in digits]
    words += [d + a for d in digits for a in letters]
    question = " ".join(words)
    assert len(set(words)) > 1024 and len(question) < ingested_engine.cfg.retrieval.max_question_chars
    assert len(lucene_escape(question).split()) == MAX_QUERY_TERMS
    result = retrieve(ingested_engine, question, "legal_analyst")
    assert isinstance(result.candidates, list)
    assert next(s for s in result.trace if s["step"] == "lexical")["hits"] >= 0


def test_undecodable_text_is_an_input_error_on_the_query_path(ingested_engine):
    """Item 6: text that cannot be encoded (a lone surrogate, as undecodable argv bytes arrive)."""
    from rag_engine.errors import QueryInputError

    with pytest.raises(QueryInputError, match="not valid text"):
        retrieve(ingested_engine, "caf\udce9?", "legal_analyst")


def test_k_is_honoured_and_validated(ingested_engine):
    from rag_engine.errors import QueryInputError

    assert len(retrieve(ingested_engine, "right to erasure", "legal_analyst", k=3).candidates) <= 3
    with pytest.raises(QueryInputError):
        retrieve(ingested_engine, "right to erasure", "legal_analyst", k=-1)


def test_the_engine_answers_over_a_routing_uri(ingested_engine):
    """``neo4j://`` against the single local server: the driver fetches a routing table and sends
    every read of the query path (one read transaction per question) to a reader."""
    direct_uri = ingested_engine.neo4j_target.uri
    routed_uri = "neo4j://" + direct_uri.split("://", 1)[1]
    routed = Engine(ingested_engine.cfg, ingested_engine.root, {**ingested_engine.env, "NEO4J_URI": routed_uri})
    question = "right to erasure ('right to be forgotten')"
    try:
        assert routed.neo4j_target.uri.startswith("neo4j://")
        over_routing = retrieve(routed, question, "legal_analyst", weights={"dense": 1.0})
        with (
            pytest.raises(neo4j.exceptions.ClientError),
            session.read_transaction(routed.driver, routed.database, packs=routed.packs) as rx,
        ):
            rx.rows("CREATE (:Intruder {x: 1})")  # a reader's transaction refuses writes
    finally:
        routed.close()
    direct = retrieve(ingested_engine, question, "legal_analyst", weights={"dense": 1.0})

    def same(cands):  # everything but the time each was retrieved
        return [c.model_dump(exclude={"retrieved_at"}) for c in cands]

    assert over_routing.candidates and same(over_routing.candidates) == same(direct.candidates)
    assert same(over_routing.expansions) == same(direct.expansions)


def test_vector_leg_rides_in_the_fulltext_statement_with_the_same_hits(ingested_engine):
    """Once the active index is cached, the question's first statement reads the epochs and both
    legs in one round trip, and each leg returns exactly what it returns alone."""
    question, role = "right to erasure of personal data", "legal_analyst"
    first = retrieve(ingested_engine, question, role, weights={"dense": 1.0})  # caches the active index
    dense_step = next(s for s in first.trace if s["step"] == "dense")
    assert dense_step["hits"] > 0
    vec = ingested_engine.embed_texts([question], purpose="test")[0]
    collections = first.collections
    identity = ingested_engine.embedder_identity
    with session.read_transaction(ingested_engine.driver, ingested_engine.database, packs=ingested_engine.packs) as rx:
        lexical, dense = reads.legs(rx, question, vec, collections, lexical_k=20, dense_k=20, identity=identity)
        assert rx.queries == 1 and rx.memo["index_cached"] is True
        assert lexical == reads.fulltext(rx, question, collections, 20)
        assert dense == reads.vector(rx, vec, collections, 20, identity)
        assert len(dense) == 20
    # an embedding still being computed is not waited for: fulltext goes first, vector after it
    with session.read_transaction(ingested_engine.driver, ingested_engine.database, packs=ingested_engine.packs) as rx:
        lexical_only, none = reads.legs(rx, question, None, collections, lexical_k=20, dense_k=20, identity=identity)
        assert none is None and lexical_only == lexical and rx.queries == 1
    # a new index epoch in the store (what a re-index switch writes): the cached index is not used
    ingested_engine.driver.execute_query("MATCH (m:IndexMeta) SET m.epoch = randomUUID()")
    with session.read_transaction(ingested_engine.driver, ingested_engine.database, packs=ingested_engine.packs) as rx:
        _, stale = reads.legs(rx, question, vec, collections, lexical_k=20, dense_k=20, identity=identity)
        assert stale is None
        assert reads.vector(rx, vec, collections, 20, identity) == dense and rx.memo["index_cached"] is False
