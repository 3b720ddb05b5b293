"""Only active chunks of enabled packs are served; edges failing the quality predicates are never
traversed and are planned for cleanup; a cleanup approval binds the records it deletes. Real Neo4j
and the real embedder (`make test`)."""

from __future__ import annotations

import pytest

from rag_engine.engine import Engine
from rag_engine.errors import ApprovalMismatch
from rag_engine.governance import approvals
from rag_engine.graph import writer
from rag_engine.graph.cleanup import cleanup_inputs, run_cleanup
from rag_engine.graph.entity_resolution import EntityResolver
from rag_engine.graph.quality import quality_report
from rag_engine.graph.traversal import traverse
from rag_engine.ingest.pipeline import ingest_pack
from rag_engine.ops.status import stored_packs
from rag_engine.retrieval.retriever import retrieve
from rag_engine.store import reads
from rag_engine.store.session import read_transaction
from tests.support.packs import POLICY, RUNBOOK, temp_pack

QUESTION = "Report a lost laptop within one hour, RB-77"
ROLE = "employee"


@pytest.fixture
def fixture_pack(engine, unique, tmp_path):
    """A pack ingested into the store but not among the engine's enabled packs."""
    pack = temp_pack(engine, unique, tmp_path / "corpus", {"policy.md": POLICY, "runbook.md": RUNBOOK})
    ingest_pack(engine, pack, extract=False)
    assert unique not in engine.packs
    return pack


def _as(engine: Engine, packs) -> Engine:
    cfg = engine.cfg.model_copy(update={"roles": {ROLE: ("kb_internal",)}})
    return Engine(cfg, engine.root, engine.env, packs=packs)


def test_a_chunk_of_a_pack_not_enabled_is_never_returned_by_any_leg(engine, fixture_pack, unique):
    own = {
        r["id"]
        for r in engine.driver.execute_query(
            "MATCH (c:Chunk {pack: $p}) WHERE c.active RETURN c.chunk_id AS id", p=unique
        ).records
    }
    assert own
    doc_keys = [
        r["k"] for r in engine.driver.execute_query("MATCH (d:Document {pack: $p}) RETURN d.key AS k", p=unique).records
    ]
    vec = engine.embed_texts([QUESTION], purpose="query")[0]
    key = f"{unique}|{'rb-77'}"

    def legs(packs):
        with read_transaction(engine.driver, engine.database, packs=packs) as rx:
            lexical, dense = reads.legs(
                rx, QUESTION, vec, ("kb_internal",), lexical_k=20, dense_k=20, identity=engine.embedder_identity
            )
            found = {r["chunk_id"] for r in lexical + (dense or [])}
            found |= {r["chunk_id"] for r in reads.fulltext(rx, QUESTION, ("kb_internal",), 20)}
            found |= {r["chunk_id"] for r in reads.vector(rx, vec, ("kb_internal",), 20, engine.embedder_identity)}
            found |= {r["chunk_id"] for r in reads.by_keys(rx, [key], ("kb_internal",))[0]}
            found |= {r["chunk_id"] for r in reads.chunks_by_id(rx, sorted(own), ("kb_internal",))}
            found |= {r["chunk_id"] for r in reads.referenced(rx, sorted(own), ("kb_internal",), 20)}
            found |= set(reads.cosines(rx, sorted(own), vec, engine.embedder_identity, ("kb_internal",)))
            titles = reads.document_titles(rx, doc_keys, ("kb_internal",))
        return found & own, titles

    # enabled: every leg finds the pack (the test would prove nothing otherwise)
    served, titles = legs([unique])
    assert served == own and titles
    # not enabled (the shipped packs only): no leg returns any of its chunks, nor its titles
    served, titles = legs(sorted(engine.packs))
    assert served == set() and titles == {}

    for packs, expect in (([fixture_pack], True), (list(engine.packs.values()), False)):
        eng = _as(engine, packs)
        try:
            result = retrieve(eng, QUESTION, ROLE, k=10)
        finally:
            eng.close()
        ids = {c.chunk_id for c in [*result.candidates, *result.expansions]}
        assert bool(ids & own) is expect, (packs, ids)


def test_rag_status_lists_every_pack_in_the_store_enabled_or_not(engine, fixture_pack, unique):
    rows = {r["pack"]: r for r in stored_packs(engine)}
    assert rows[unique]["enabled"] is False and rows[unique]["active_chunks"] > 0
    assert all(rows[p]["enabled"] for p in engine.packs if p in rows)


def _prov(chunk_id: str, version: str, doc_id: str) -> dict[str, str]:
    return {
        "doc_id": doc_id,
        "chunk_id": chunk_id,
        "doc_version": version,
        "confidence_bucket": "high",
        "extraction_run_id": "fixture",
        "model": "fixture",
        "prompt_hash": "p",
        "source_type": "llm_inferred_graph",
    }


def test_an_edge_without_provenance_is_never_traversed_and_is_planned_for_cleanup(engine, fixture_pack, unique):
    rows = engine.driver.execute_query(
        "MATCH (c:Chunk {pack: $p}) WHERE c.active RETURN c.chunk_id AS id, c.doc_version AS v, c.doc_id AS d "
        "ORDER BY id",
        p=unique,
    ).records
    chunk = rows[0]
    resolver = EntityResolver(unique, {})
    laptop, vault, ghost = (resolver.entity_id(n) for n in ("laptop", "vault", "ghost"))

    def entity(eid: str, name: str) -> dict[str, object]:
        return {
            "entity_id": eid,
            "name": name,
            "normalized_name": name,
            "type": "system",
            "description": "",
            "provenance": _prov(chunk["id"], chunk["v"], chunk["d"]),
        }

    record = {
        "entities": [entity(laptop, "laptop"), entity(vault, "vault"), entity(ghost, "ghost")],
        "relationships": [
            {
                "source_id": laptop,
                "target_id": vault,
                "type": "depends_on",
                "description": "",
                "confidence": 0.8,
                "retrieval_eligible": True,
                "provenance": _prov(chunk["id"], chunk["v"], chunk["d"]),
            }
        ],
    }
    writer.write_inferred(engine.driver, engine.database, pack=unique, doc_id=chunk["d"], records=[record])
    # an injected edge: eligible, confident, pointing at a current chunk, but with no provenance
    engine.driver.execute_query(
        "MATCH (a:Entity {entity_id: $a}), (b:Entity {entity_id: $b}) "
        "CREATE (a)-[:RELATED {type: 'depends_on', confidence: 0.9, retrieval_eligible: true, chunk_id: $c}]->(b)",
        a=laptop,
        b=ghost,
        c=chunk["id"],
    )
    cfg = engine.cfg.traversal
    with read_transaction(engine.driver, engine.database, packs=[unique]) as rx:
        paths = traverse(rx, [(laptop, "laptop")], cfg, ("kb_internal",))
    reached = {h.to_id for p in paths for h in p.hops}
    assert vault in reached and ghost not in reached
    inputs = cleanup_inputs(engine.driver, engine.database, [unique])
    assert inputs["plan"]["unprovenanced_inferred_edges"] == 1
    assert quality_report(engine.driver, engine.database, [unique])["missing_provenance"]["count"] == 1
    approval = approvals.Approval.grant(approvals.GRAPH_CLEANUP, inputs, approved_by="local:t", reason="test")
    removed = run_cleanup(engine.driver, engine.database, [unique], approval, run_id="t")["removed"]
    assert removed["unprovenanced_inferred_edges"] == 1
    with read_transaction(engine.driver, engine.database, packs=[unique]) as rx:
        assert {h.to_id for p in traverse(rx, [(laptop, "laptop")], cfg, ("kb_internal",)) for h in p.hops} == {vault}


def test_a_replayed_cleanup_hash_is_refused_after_the_plan_changed_with_the_same_counts(engine, fixture_pack, unique):
    """#36 M1: the hash binds the ids to be deleted, not the plan's counts."""

    def orphan(name: str) -> None:
        engine.driver.execute_query(
            "CREATE (:Entity {entity_id: $id, name: $n, normalized_name: $n, pack: $p})",
            id=f"{unique}:{name}",
            n=name,
            p=unique,
        )

    orphan("first")
    before = cleanup_inputs(engine.driver, engine.database, [unique])
    approval = approvals.Approval.grant(approvals.GRAPH_CLEANUP, before, approved_by="local:t", reason="test")
    engine.driver.execute_query("MATCH (e:Entity {entity_id: $id}) DETACH DELETE e", id=f"{unique}:first")
    orphan("second")
    after = cleanup_inputs(engine.driver, engine.database, [unique])
    assert after["plan"] == before["plan"] and approvals.inputs_hash(after) != approvals.inputs_hash(before)
    with pytest.raises(ApprovalMismatch):
        run_cleanup(engine.driver, engine.database, [unique], approval, run_id="t")
    left = engine.driver.execute_query("MATCH (e:Entity {entity_id: $id}) RETURN count(e) AS n", id=f"{unique}:second")
    assert left.records[0]["n"] == 1


def test_a_dangling_edge_is_never_traversed_and_is_planned_for_cleanup(engine, fixture_pack, unique):
    """An edge with full provenance whose evidence chunk is no longer current (inactive, then
    deleted) is not a path: traversal skips it and cleanup plans its removal as dangling."""
    rows = engine.driver.execute_query(
        "MATCH (c:Chunk {pack: $p}) WHERE c.active RETURN c.chunk_id AS id, c.doc_version AS v, c.doc_id AS d "
        "ORDER BY id",
        p=unique,
    ).records
    kept, gone = rows[0], rows[1]
    resolver = EntityResolver(unique, {})
    laptop, vault, ghost = (resolver.entity_id(n) for n in ("laptop", "vault", "ghost"))

    def entity(eid: str, name: str) -> dict[str, object]:
        return {
            "entity_id": eid,
            "name": name,
            "normalized_name": name,
            "type": "system",
            "description": "",
            "provenance": _prov(kept["id"], kept["v"], kept["d"]),
        }

    def edge(target: str, chunk) -> dict[str, object]:
        return {
            "source_id": laptop,
            "target_id": target,
            "type": "depends_on",
            "description": "",
            "confidence": 0.9,
            "retrieval_eligible": True,
            "provenance": _prov(chunk["id"], chunk["v"], chunk["d"]),
        }

    record = {
        "entities": [entity(laptop, "laptop"), entity(vault, "vault"), entity(ghost, "ghost")],
        "relationships": [edge(vault, kept), edge(ghost, gone)],
    }
    writer.write_inferred(engine.driver, engine.database, pack=unique, doc_id=kept["d"], records=[record])
    cfg = engine.cfg.traversal

    def reached() -> set[str]:
        with read_transaction(engine.driver, engine.database, packs=[unique]) as rx:
            return {h.to_id for p in traverse(rx, [(laptop, "laptop")], cfg, ("kb_internal",)) for h in p.hops}

    assert reached() == {vault, ghost}  # both edges are paths while their evidence is current
    assert cleanup_inputs(engine.driver, engine.database, [unique])["plan"]["dangling_inferred_edges"] == 0
    # the evidence chunk of one edge stops being current, then is deleted outright
    for change in (
        "MATCH (c:Chunk {chunk_id: $c}) SET c.active = false",
        "MATCH (c:Chunk {chunk_id: $c}) DETACH DELETE c",
    ):
        engine.driver.execute_query(change, c=gone["id"])
        assert reached() == {vault}
        inputs = cleanup_inputs(engine.driver, engine.database, [unique])
        assert inputs["plan"]["dangling_inferred_edges"] == 1, inputs["plan"]
    approval = approvals.Approval.grant(approvals.GRAPH_CLEANUP, inputs, approved_by="local:t", reason="test")
    removed = run_cleanup(engine.driver, engine.database, [unique], approval, run_id="t")["removed"]
    assert removed["dangling_inferred_edges"] == 1
    assert reached() == {vault}
