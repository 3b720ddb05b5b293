"""A pack configured with `extraction: false` gets references and retrieval but no LLM graph:
no model call, and inferred records written while extraction was on are removed."""

from __future__ import annotations

from rag_engine.graph import writer
from rag_engine.ingest.pipeline import ingest_pack
from rag_engine.packs import load_pack
from tests.support.packs import POLICY, RUNBOOK, temp_pack


def _inferred(engine, pack: str) -> int:
    records, _, _ = engine.driver.execute_query(
        "MATCH (:Entity)-[r:RELATED {pack: $pack}]->(:Entity) RETURN count(r) AS n",
        pack=pack,
        database_=engine.database,
    )
    return records[0]["n"]


def test_extraction_off_calls_no_model_and_removes_inferred_records(engine, unique, tmp_path):
    on = temp_pack(engine, unique, tmp_path / "corpus", {"policy.md": POLICY, "runbook.md": RUNBOOK})
    ingest_pack(engine, on, extract=False)
    chunk = engine.driver.execute_query(
        "MATCH (c:Chunk {pack: $p, doc_id: 'policy'}) RETURN c.chunk_id AS id LIMIT 1",
        p=unique,
        database_=engine.database,
    ).records[0]["id"]
    prov = {"chunk_id": chunk, "doc_id": "policy", "extraction_run_id": "r1", "model": "m", "prompt_hash": "p"}
    entity = {
        "entity_id": f"{unique}:laptop",
        "name": "Laptop",
        "normalized_name": "laptop",
        "type": "asset",
        "description": "",
        "provenance": prov,
    }
    other = {**entity, "entity_id": f"{unique}:runbook", "name": "Runbook", "normalized_name": "runbook"}
    rel = {
        "source_id": entity["entity_id"],
        "target_id": other["entity_id"],
        "type": "refers_to",
        "confidence": 0.9,
        "retrieval_eligible": True,
        "description": "",
        "provenance": prov,
    }
    writer.write_inferred(
        engine.driver,
        engine.database,
        pack=unique,
        doc_id="policy",
        records=[{"entities": [entity, other], "relationships": [rel]}],
    )
    assert _inferred(engine, unique) == 1

    off = load_pack(on.entry.model_copy(update={"extraction": False}), engine.root)
    extraction_calls = lambda: sum(1 for r in engine.ledger.records() if r.purpose == "graph_extraction")  # noqa: E731
    before = extraction_calls()
    report = ingest_pack(engine, off)
    assert report["llm_extraction"].total("disabled") == 2 and report["llm_extraction"].total("extracted") == 0
    assert extraction_calls() == before
    assert _inferred(engine, unique) == 0
    assert report["graph_writes"].total("resolved") > 0  # references still resolve
