"""Round two, L5: an ingest straddling a re-index switch activated chunks with no vector in the
active index (status flagged it).

The steps of one ingest are called in order with the suite's embedder (A): the new version's
vectors are prepared for A's index, then a re-index switches the store to B (the new version is
not live yet, so the switch's check passes), then the prepared write runs. It must not activate
a version whose vectors are for an index that is no longer active. The whole test database is
moved to B and back, as tests/test_reindex.py does, restored in ``finally``.
"""

from __future__ import annotations

import pytest

from rag_engine.errors import EmbedderMismatch
from rag_engine.governance.approvals import REINDEX_CUTOVER, Approval
from rag_engine.ingest.documents import discover
from rag_engine.ingest.pipeline import ingest_pack
from rag_engine.ingest.reindex import cutover_plan, run_reindex
from rag_engine.ingest.steps import chunks_step, index_grouped, references_step, source_step
from rag_engine.store import schema
from tests.support.packs import POLICY, RUNBOOK, temp_pack
from tests.test_reindex import engines_a_b


def _active(engine, pack: str, doc_id: str) -> list[str]:
    rows, _, _ = engine.driver.execute_query(
        "MATCH (c:Chunk {pack: $p, doc_id: $d, active: true}) RETURN DISTINCT c.doc_version AS v", p=pack, d=doc_id
    )
    return [r["v"] for r in rows]


def test_a_version_embedded_before_a_reindex_switch_is_not_activated_after_it(
    base_config, tmp_path, neo4j_driver, unique
):
    a, b = engines_a_b(base_config, tmp_path)
    corpus = tmp_path / "corpus"
    pack = temp_pack(a, unique, corpus, {"policy.md": POLICY, "runbook.md": RUNBOOK})
    ingest_pack(a, pack, extract=False)
    (old_version,) = _active(a, unique, "runbook")
    (corpus / "runbook.md").write_text(RUNBOOK + "\nAlso notify the service desk.\n")
    key = next(r.partition_key for r in discover(pack) if r.doc_id == "runbook")
    for step in (source_step, chunks_step, references_step):
        step(a, pack, key)
    grouped = index_grouped(a, pack)
    _, prepared = grouped.prepare(key)  # vectors for A's index, not written yet
    try:
        plan = cutover_plan(b)
        switched = run_reindex(
            b, drop_old=False, approval=Approval.grant(REINDEX_CUTOVER, plan, approved_by="t", reason="t")
        )
        assert switched.status == "switched"
        with pytest.raises(EmbedderMismatch, match="active vector index changed during the run"):
            grouped.write_one(prepared)
        assert _active(a, unique, "runbook") == [old_version]  # the old version still serves
        missing = neo4j_driver.execute_query(
            f"MATCH (c:Chunk {{pack: $p, active: true}}) WHERE c.{switched.property} IS NULL RETURN count(c) AS n",
            p=unique,
        ).records[0]["n"]
        assert missing == 0
    finally:
        plan_back = cutover_plan(a)
        back = run_reindex(
            a, drop_old=True, approval=Approval.grant(REINDEX_CUTOVER, plan_back or {}, approved_by="t", reason="t")
        )
        a.close()
        b.close()
    assert back.status == "switched"
    assert schema.current_embedder(neo4j_driver, "neo4j")["identity"] == a.embedder_identity
