"""Ingestion on the real Neo4j: idempotence, supersede, per-document errors, reference resolution."""

from __future__ import annotations

import pytest

from rag_engine.errors import DocumentError
from rag_engine.ingest.documents import discover
from rag_engine.ingest.pipeline import ingest_pack
from tests.support.packs import POLICY, RUNBOOK, graph_counts, temp_pack


def test_reingest_is_idempotent(engine, unique, tmp_path):
    pack = temp_pack(engine, unique, tmp_path / "corpus", {"policy.md": POLICY, "runbook.md": RUNBOOK})
    first = ingest_pack(engine, pack)
    assert not first["source_documents"].rejected
    counts = graph_counts(engine, unique)
    assert counts["documents"] == 2 and counts["chunks"] >= 3
    resolved = first["graph_writes"].total("resolved")
    assert resolved >= 2  # RB-77 from both policy chunks, POL-900 from the runbook
    again = ingest_pack(engine, pack)
    assert graph_counts(engine, unique) == counts
    assert again["graph_writes"].total("resolved") == resolved


def test_new_version_supersedes_old_and_unchanged_file_adds_nothing(engine, unique, tmp_path):
    corpus = tmp_path / "corpus"
    pack = temp_pack(engine, unique, corpus, {"policy.md": POLICY, "runbook.md": RUNBOOK})
    before = {r.doc_id: r.partition_key for r in discover(pack)}
    ingest_pack(engine, pack)
    assert {r.doc_id: r.partition_key for r in discover(pack)} == before  # unchanged: same keys

    (corpus / "policy.md").write_text(POLICY.replace("within one hour", "within thirty minutes"))
    after = {r.doc_id: r.partition_key for r in discover(pack)}
    assert after["runbook"] == before["runbook"] and after["policy"] != before["policy"]
    ingest_pack(engine, pack, keys=[after["policy"]])

    rows, _, _ = engine.driver.execute_query(
        "MATCH (v:DocumentVersion {doc_id: 'policy'})<-[:HAS_VERSION]-(:Document {pack: $pack}) "
        "RETURN v.key AS key, v.status AS status",
        pack=unique,
    )
    assert {r["key"]: r["status"] for r in rows} == {
        f"{unique}:{before['policy']}": "superseded",
        f"{unique}:{after['policy']}": "current",
    }
    rows, _, _ = engine.driver.execute_query(
        "MATCH (c:Chunk {pack: $pack, doc_id: 'policy'}) RETURN c.doc_version AS v, c.active AS active", pack=unique
    )
    old_v, new_v = before["policy"].split("--")[1], after["policy"].split("--")[1]
    assert {r["active"] for r in rows if r["v"] == old_v} == {False}
    assert {r["active"] for r in rows if r["v"] == new_v} == {True}
    # references into the superseded chunks are gone; the runbook now cites the new version
    rows, _, _ = engine.driver.execute_query(
        "MATCH (s:Chunk {pack: $pack})-[:REFERENCES]->(t:Chunk) RETURN DISTINCT t.doc_version AS v, t.active AS a",
        pack=unique,
    )
    assert all(r["a"] for r in rows) and old_v not in {r["v"] for r in rows}


def test_bad_documents_fail_alone_with_clear_reasons(engine, unique, tmp_path):
    files: dict[str, str | bytes] = {
        "good.md": POLICY,
        "empty.md": "  \n",
        "latin1.md": "caf\xe9 policy".encode("latin-1"),
        "binary.md": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)),
        "huge.md": "A" * (20 * 1024 * 1024),
        "badfront.md": "---\ncollection: [unclosed\n---\n# Broken\n\n## Part\nText.\n",
    }
    pack = temp_pack(engine, unique, tmp_path / "corpus", files)
    reports = ingest_pack(engine, pack)
    rejected = {k.split("--")[0]: v for k, v in reports["source_documents"].rejected.items()}
    assert set(rejected) == {"empty", "latin1", "binary", "huge", "badfront"}
    assert "front matter is not valid YAML" in rejected["badfront"]  # a pack rule error stays per document
    assert "empty" in rejected["empty"]
    assert "not valid UTF-8 at byte 3" in rejected["latin1"]
    assert "binary" in rejected["binary"]
    assert "exceeds the limit" in rejected["huge"] and "20,971,520" in rejected["huge"]
    # the good document went all the way through; the bad ones were skipped, not retried
    assert [k.split("--")[0] for k in reports["chunk_index"].done] == ["good"]
    assert len(reports["chunks"].skipped) == 5
    assert graph_counts(engine, unique)["documents"] == 1


def test_partition_key_for_a_vanished_version_is_refused(engine, unique, tmp_path):
    from rag_engine.ingest.documents import load_document

    corpus = tmp_path / "corpus"
    pack = temp_pack(engine, unique, corpus, {"policy.md": POLICY})
    old_key = discover(pack)[0].partition_key
    (corpus / "policy.md").write_text(POLICY + "\n## Addendum\nNew text.\n")
    with pytest.raises(DocumentError, match="superseded"):
        load_document(pack, old_key, max_bytes=10_000)


def test_gdpr_references_resolve(ingested_engine, capsys):
    rows, _, _ = ingested_engine.driver.execute_query(
        """
        MATCH (s:Chunk {pack: 'legal_regulatory', active: true})-[r:CITES]->(k:RefKey)
        OPTIONAL MATCH (k)<-[:ANSWERS_TO]-(t:Chunk {active: true}) WHERE t <> s
        WITH r, k, count(t) > 0 AS resolved
        RETURN resolved, count(*) AS n, collect(DISTINCT k.key)[..5] AS sample
        """
    )
    by = {r["resolved"]: r for r in rows}
    resolved, unresolved = by[True]["n"], by.get(False, {"n": 0})["n"]
    with capsys.disabled():
        print(f"\nGDPR references: {resolved} resolved, {unresolved} unresolved")
    assert resolved > 300
    assert resolved > 2 * unresolved
    rows, _, _ = ingested_engine.driver.execute_query(
        "MATCH (s:Chunk {pack: 'legal_regulatory'})-[:CITES]->(k:RefKey {key: 'legal_regulatory|directive:95/46/ec'}) "
        "OPTIONAL MATCH (k)<-[:ANSWERS_TO]-(t) RETURN count(DISTINCT s) AS citing, count(t) AS targets"
    )
    assert rows[0]["citing"] > 0 and rows[0]["targets"] == 0  # kept, counted, unresolvable in this corpus
    rows, _, _ = ingested_engine.driver.execute_query(
        "MATCH (s:Chunk {active: true})-[e:REFERENCES]->(t:Chunk {active: true}) "
        "WHERE e.raw CONTAINS 'Article 23(1)' RETURN DISTINCT t.anchor AS anchor"
    )
    assert {r["anchor"] for r in rows} & {"gdpr-ch03#art23-p1"}


def test_removed_document_is_withdrawn_from_retrieval(engine, unique, tmp_path):
    from rag_engine.retrieval.retriever import retrieve

    corpus = tmp_path / "corpus"
    pack = temp_pack(engine, unique, corpus, {"policy.md": POLICY, "runbook.md": RUNBOOK})
    ingest_pack(engine, pack)
    (corpus / "runbook.md").unlink()
    ingest_pack(engine, pack)
    rows, _, _ = engine.driver.execute_query(
        "MATCH (d:Document {pack: $p, doc_id: 'runbook'})-[:HAS_VERSION]->(v) "
        "OPTIONAL MATCH (c:Chunk {pack: $p, doc_id: 'runbook', active: true}) RETURN v.status AS s, count(c) AS n",
        p=unique,
    )
    assert rows[0]["s"] == "withdrawn" and rows[0]["n"] == 0
    rows, _, _ = engine.driver.execute_query(
        "MATCH (:Chunk {pack: $p})-[:REFERENCES]->(t:Chunk {doc_id: 'runbook'}) RETURN count(*) AS n", p=unique
    )
    assert rows[0]["n"] == 0
    eng = type(engine)(
        engine.cfg.model_copy(update={"roles": {"r": ("kb_internal",)}}), engine.root, engine.env, packs=[pack]
    )
    try:
        result = retrieve(eng, "Lock the device remotely and rotate credentials", "r", k=50)
    finally:
        eng.close()
    assert not [c for c in result.candidates if c.chunk_id.startswith(f"{unique}:runbook--")]


def test_changed_rules_on_the_same_chunk_drop_old_reference_keys(engine, unique):
    from rag_engine.graph import writer
    from rag_engine.packs import SourceDocument, make_chunk
    from rag_engine.store import reads
    from rag_engine.store.session import read_transaction

    doc = SourceDocument(
        pack=unique,
        doc_id="d",
        version="v1",
        title="t",
        text="x",
        collection="kb_internal",
        language="en",
        source_path="x",
    )
    for keys in (("policy:pol-111",), ("policy:pol-222",)):  # same chunk id, the rules now give another key
        writer.write_document_version(
            engine.driver,
            engine.database,
            pack=unique,
            doc_id="d",
            version="v1",
            title="t",
            collection="kb_internal",
            content_hash="h",
            source_path="x",
            chunks=[make_chunk(doc, 0, "a", "A", "text", keys)],
        )
        writer.activate_version(engine.driver, engine.database, pack=unique, doc_id="d", version="v1")

    def hits(key):
        with read_transaction(engine.driver, engine.database, packs=[unique]) as rx:
            return reads.by_keys(rx, [f"{unique}|{key}"], ("kb_internal",), 5)[0]

    assert hits("policy:pol-111") == [] and len(hits("policy:pol-222")) == 1


def test_an_unexpected_failure_of_one_partition_keeps_the_others(engine, unique, tmp_path):
    pack = temp_pack(engine, unique, tmp_path / "corpus", {"policy.md": POLICY, "runbook.md": RUNBOOK})
    keys = [r.partition_key for r in discover(pack)]
    from rag_engine.ingest.runner import run_step

    def step(key):
        if key.startswith("policy--"):
            raise RuntimeError("disk on fire")
        return {"ok": 1}

    report = run_step("probe", keys, step)
    assert list(report.done) == [k for k in keys if k.startswith("runbook--")]
    assert report.failed == {next(k for k in keys if k.startswith("policy--")): "RuntimeError: disk on fire"}


def test_two_files_with_one_document_id_do_not_stop_the_pack(engine, unique, tmp_path):
    pack = temp_pack(engine, unique, tmp_path / "corpus", {"a b.md": POLICY, "a_b.md": RUNBOOK})
    assert [r.path.name for r in discover(pack)] == ["a b.md"]


def test_old_version_keeps_answering_until_the_new_one_is_indexed(engine, unique, tmp_path):
    from rag_engine.ingest.steps import chunks_step, index_step, source_step

    corpus = tmp_path / "corpus"
    pack = temp_pack(engine, unique, corpus, {"policy.md": POLICY})
    ingest_pack(engine, pack)
    (corpus / "policy.md").write_text(POLICY.replace("within one hour", "within ten minutes"))
    new_key = discover(pack)[0].partition_key

    def active_versions():
        rows, _, _ = engine.driver.execute_query(
            "MATCH (c:Chunk {pack: $p, active: true}) RETURN DISTINCT c.doc_version AS v", p=unique
        )
        return {r["v"] for r in rows}

    before = active_versions()
    source_step(engine, pack, new_key)
    chunks_step(engine, pack, new_key)  # written, not yet indexed: still the old version answering
    assert active_versions() == before
    index_step(engine, pack, new_key)
    assert active_versions() == {new_key.split("--")[1]}
