"""The one read after fusion (``store.top_reads``) gives what the three reads it replaced gave: the
titles of ``reads.document_titles``, the evidence of the statement sentence evidence ran before
(``EVIDENCE``, kept here as the reference) and, through ``expansion.cited_by``, the rows of
``reads.referenced`` (real Neo4j, both shipped packs)."""

from __future__ import annotations

import random
import time

import pytest

from rag_engine.governance.policy import gate
from rag_engine.retrieval.expansion import cited_by
from rag_engine.retrieval.retriever import retrieve
from rag_engine.store import reads, top_reads
from rag_engine.store.epochs import active_index
from rag_engine.store.session import read, read_transaction
from rag_engine.store.units import UNITS_SUFFIX
from rag_engine.text.sentences import SPLITTER_VERSION

ROLES = ("legal_analyst", "employee")

EVIDENCE = (
    f"MATCH (c:Chunk) WHERE c.chunk_id IN $ids AND {reads.SERVED} "
    "RETURN c.chunk_id AS chunk_id, "
    "CASE WHEN $embedding IS NULL OR c[$property] IS NULL THEN null "
    "ELSE vector.similarity.cosine(c[$property], $embedding) END AS cosine, "
    "CASE WHEN c.units_splitter = $splitter THEN c[$units] END AS units"
)
"""Sentence evidence's own statement before the one read (cosines and unit vectors of the scored chunks)."""


def _evidence(rx, ids, embedding, identity, collections) -> dict:
    active, _ = active_index(rx, identity)
    rows = rx.values(
        EVIDENCE,
        ids=ids,
        property=active.property,
        units=active.property + UNITS_SUFFIX,
        embedding=embedding,
        splitter=SPLITTER_VERSION,
        **reads.scope(rx, collections),
    )
    return {r["chunk_id"]: {"cosine": r["cosine"], "units": r["units"]} for r in rows}


def _citing(engine) -> list[str]:
    """Active chunks that cite another chunk, and some that cite none, in a fixed order."""
    rows = read(
        engine.driver,
        engine.database,
        "MATCH (c:Chunk {active: true}) OPTIONAL MATCH (c)-[e:REFERENCES]->() "
        "RETURN c.chunk_id AS id, count(e) AS n ORDER BY id",
    )
    citing = [r["id"] for r in rows if r["n"]]
    assert len(citing) >= 10, "the shipped packs hold references"
    return citing + [r["id"] for r in rows if not r["n"]][:20]


def _sent(engine, rx, ids, collections, *, evidence_ids, embedding=None, references=True):
    """``top_reads.started`` with the engine's identity and the current splitter."""
    return top_reads.started(
        rx,
        ids,
        evidence_ids=evidence_ids,
        embedding=embedding,
        identity=engine.embedder_identity,
        collections=collections,
        splitter=SPLITTER_VERSION,
        references=references,
    )


def _key(row: dict) -> tuple:
    return (row["chunk_id"], row["via"], row["from_chunk"], row["seed_rank"], *(row[f] for f in reads.FIELDS))


@pytest.mark.parametrize("role", ROLES)
def test_expansion_from_the_top_read_equals_the_referenced_statement(ingested_engine, role):
    engine = ingested_engine
    collections = gate(engine.cfg, role, None).collections
    pool = _citing(engine)
    rng = random.Random(11)
    compared = expanded = 0
    with read_transaction(engine.driver, engine.database, packs=engine.packs) as rx:
        for _ in range(60):
            top = rng.sample(pool, 20)
            read_top = _sent(engine, rx, top, collections, evidence_ids=top).result()
            served = list(read_top.cited)  # a chunk outside the role's collections is not read
            for limit in (1, 5, 100):
                seeds = served[: rng.randint(1, 10)]
                want = reads.referenced(rx, seeds, collections, limit)
                got = cited_by(seeds, read_top.cited, limit)
                assert [_key(r) for r in got] == [_key(r) for r in want], (seeds, limit)
                compared += 1
                expanded += bool(want)
    assert compared == 180 and expanded > 30  # the comparison saw real expansions


@pytest.mark.parametrize("role", ROLES)
def test_titles_and_evidence_from_the_top_read_equal_their_own_reads(ingested_engine, role):
    engine = ingested_engine
    collections = gate(engine.cfg, role, None).collections
    pool = _citing(engine)
    vector = engine.embed_texts(["the right to erasure"], purpose="query")[0]
    with read_transaction(engine.driver, engine.database, packs=engine.packs) as rx:
        top = pool[:25]
        scored = top[:12]
        got = _sent(engine, rx, top, collections, evidence_ids=scored, embedding=vector, references=False).result()
        served = reads.chunks_by_id(rx, top, collections)
        keys = sorted({f"{r['chunk_id'].split(':', 1)[0]}:{r['doc_id']}" for r in served})
        want_evidence = _evidence(rx, scored, vector, engine.embedder_identity, collections)
        assert got.titles == reads.document_titles(rx, keys, collections)
        assert got.evidence == want_evidence
        assert got.cited is None


def test_a_question_reads_the_store_in_four_statements(ingested_engine):
    # the legs' statement (epochs, fulltext, and the vector leg when the embedding is ready by
    # then), the vector leg when it was not, the planner's entity lookup, and the top candidates'
    # read: titles, sentence evidence and reference expansion no longer take a statement each
    # (there were seven)
    question = "What is the deadline for notifying a data breach?"
    retrieve(ingested_engine, question, "legal_analyst")  # the active index and the graph's facts, cached
    result = retrieve(ingested_engine, question, "legal_analyst")
    step = next(s for s in result.trace if s["step"] == "reference_expansion")
    assert step["read"] == "with_top_candidates" and step["added"] >= 0
    assert step["store_statements"] <= 4, step


def test_each_step_says_how_much_of_its_time_the_store_took(ingested_engine):
    # the trace splits a question's time into Neo4j statements and the rest (``evals.bench.query``
    # reports both against the raw hybrid query): every statement in exactly one step
    question = "What is the deadline for notifying a data breach?"
    result = retrieve(ingested_engine, question, "legal_analyst")
    steps = {s["step"]: s for s in result.trace}
    assert "store_ms" not in steps["policy_gate"]  # before the read transaction
    inside = [s for s in result.trace if s["step"] != "policy_gate"]
    assert inside and all(0 <= s["store_ms"] <= s["ms"] + 0.01 for s in inside), inside
    assert steps["lexical"]["store_ms"] > 0 and steps["rerank"]["store_ms"] > 0
    assert steps["fusion"]["store_ms"] == 0  # no statement of its own (the question names no reference)
    total = steps["reference_expansion"]["store_ms_total"]
    assert total == pytest.approx(sum(s["store_ms"] for s in inside), abs=0.01 * len(inside)), (inside, total)
    assert steps["reference_expansion"]["store_statements"] >= 2


def test_a_failed_statement_counts_its_time(ingested_engine):
    from neo4j.exceptions import CypherSyntaxError

    held = []

    def failing() -> None:
        with read_transaction(ingested_engine.driver, ingested_engine.database, packs=ingested_engine.packs) as rx:
            held.append(rx)
            rx.rows("RETURN RETURN")

    with pytest.raises(CypherSyntaxError):
        failing()
    assert held[0].queries == 1 and held[0].store_ms > 0


def test_a_started_statement_counts_the_wait_not_the_work_done_meanwhile(ingested_engine):
    # the rerank stage sends the top read, splits the chunks into units while the store answers,
    # then takes the rows: its store_ms is what it waited, not the units' time
    engine = ingested_engine
    with read_transaction(engine.driver, engine.database, packs=engine.packs) as rx:
        pending = rx.started("UNWIND range(1, 3) AS x RETURN x, x * 2 AS y")
        time.sleep(0.3)
        rows = pending.values()
        assert rows == [{"x": 1, "y": 2}, {"x": 2, "y": 4}, {"x": 3, "y": 6}]
        assert rx.queries == 1 and 0 < rx.store_ms < 300 and rx.pending is None
        assert pending.values() == rows  # received once, the same rows again
        # a statement sent while another is pending receives that one first, counted under it
        first = rx.started("UNWIND range(1, 2) AS x RETURN x")
        assert rx.values("RETURN 1 AS one") == [{"one": 1}] and rx.queries == 3
        assert first.values() == [{"x": 1}, {"x": 2}]


def test_a_started_statement_that_fails_while_streaming_is_timed_and_fails_again(ingested_engine):
    from neo4j.exceptions import ClientError

    held = []

    def failing() -> None:
        with read_transaction(ingested_engine.driver, ingested_engine.database, packs=ingested_engine.packs) as rx:
            held.append(rx)
            pending = rx.started("UNWIND [1, 0] AS x RETURN 1 / x AS y")  # fails on its second row
            held.append(rx.store_ms)
            try:
                pending.records()
            except ClientError:
                held.append(rx.store_ms)
            assert rx.pending is None
            pending.records()  # the same error again, not an empty list

    with pytest.raises(ClientError):
        failing()
    rx, sent_ms, failed_ms = held
    assert rx.queries == 1 and failed_ms > sent_ms


def test_the_top_read_sent_first_gives_what_it_gives_at_once(ingested_engine):
    engine = ingested_engine
    collections = gate(engine.cfg, "legal_analyst", None).collections
    top = _citing(engine)[:20]
    vector = engine.embed_texts(["the right to erasure"], purpose="query")[0]
    with read_transaction(engine.driver, engine.database, packs=engine.packs) as rx:
        at_once = _sent(engine, rx, top, collections, evidence_ids=top[:12], embedding=vector).result()
        pending = _sent(engine, rx, top, collections, evidence_ids=top[:12], embedding=vector)
        sum(range(100_000))  # work of the caller's own meanwhile
        later = pending.result()
        assert pending.result() == later  # a second call gives the same, not an empty read
        sent = rx.queries
        empty = _sent(engine, rx, [], collections, evidence_ids=top[:12], embedding=vector)
        assert rx.queries == sent  # no ids, no statement
    assert later == at_once and later.evidence and later.titles and any(later.cited.values())
    assert empty.result() == top_reads.TopReads(cited={})


def test_a_trivial_statement_is_timed(ingested_engine):
    from rag_engine.store.measurement import trivial_statement_ms

    assert 0 < trivial_statement_ms(ingested_engine.driver, ingested_engine.database, runs=20) < 1000


@pytest.mark.parametrize("evidence_n", [20, 5])
def test_one_statement_composes_the_engines_reads(ingested_engine, evidence_n):
    """``measurement.one_statement_reads``, as ``evals.bench.one_statement`` calls it, composes the
    engine's own reads in one statement: its legs are the fulltext and vector legs' rows, its top
    the plain-RRF top of those (not the engine's fusion), each top row what ``top_reads`` reads of
    that chunk, and the first ``evidence_n`` by fused score the ones with a cosine and units."""
    from evals.bench.one_statement import one_statement
    from rag_engine.store import measurement, schema

    engine = ingested_engine
    cfg = engine.cfg.retrieval
    collections = gate(engine.cfg, "legal_analyst", None).collections
    question = "Exceptions to the right to erasure?"
    vector = engine.embed_texts([question], purpose="query")[0]  # the one the bench embeds too
    meta = schema.current_embedder(engine.driver, engine.database)
    epoch = measurement.index_epoch(engine.driver, engine.database)
    row = one_statement(engine, question, list(collections), meta, epoch, evidence_n=evidence_n)
    with read_transaction(engine.driver, engine.database, packs=engine.packs) as rx:
        lexical = reads.fulltext(rx, question, collections, cfg.lexical_k)
        dense = reads.vector(rx, vector, collections, cfg.dense_k, engine.embedder_identity)
        assert [r["chunk_id"] for r in row["lexical"]] == [r["chunk_id"] for r in lexical]
        assert [r["chunk_id"] for r in row["dense"]] == [r["chunk_id"] for r in dense]
        fused: dict[str, float] = {}
        for leg in (lexical, dense):
            for rank, r in enumerate(leg, 1):
                fused[r["chunk_id"]] = fused.get(r["chunk_id"], 0.0) + 1.0 / (cfg.rrf_k + rank)
        ranked = sorted(fused, key=lambda cid: -fused[cid])
        top = {t["chunk_id"]: t for t in row["top"]}
        assert len(top) == min(cfg.rerank.top_n, len(ranked))
        cutoff = fused[ranked[len(top) - 1]]  # ties at the cut may fall either way
        assert {cid for cid in ranked if fused[cid] > cutoff} <= set(top) <= {c for c in ranked if fused[c] >= cutoff}
        own = _sent(engine, rx, list(top), collections, evidence_ids=list(top), embedding=vector).result()
    scored = [t for t in top.values() if t["cosine"] is not None]
    assert len(scored) == min(evidence_n, len(top)) and any(t["units"] for t in scored)
    unscored = [cid for cid in top if top[cid]["cosine"] is None]
    assert all(fused[t["chunk_id"]] >= fused[cid] for t in scored for cid in unscored)
    for t in scored:
        assert t["cosine"] == pytest.approx(own.evidence[t["chunk_id"]]["cosine"])
        assert t["units"] == own.evidence[t["chunk_id"]]["units"]
    for cid, t in top.items():
        if t["doc_key"] is not None:
            assert own.titles[t["doc_key"]] == (t["title"] or "")
        assert sorted(c["chunk_id"] for c in t["cited"]) == sorted(c["chunk_id"] for c in own.cited[cid])
