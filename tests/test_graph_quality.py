"""Graph quality checks and approved cleanup, through Dagster, on the real Neo4j."""

from __future__ import annotations

import dagster as dg
import pytest

from rag_assets.definitions import build_definitions
from rag_assets.demo import materialize_pack
from rag_engine.graph import writer
from rag_engine.graph.cleanup import CleanupNotApproved, run_cleanup
from rag_engine.graph.quality import quality_report


def _seed_valid_and_broken(engine, pack: str) -> None:
    rows, _, _ = engine.driver.execute_query(
        "MATCH (c:Chunk {pack: $p, active: true}) RETURN c.chunk_id AS id, c.doc_id AS doc, c.doc_version AS v "
        "ORDER BY id LIMIT 1",
        p=pack,
    )
    chunk = rows[0]

    def prov(chunk_id):
        return {
            "doc_id": chunk["doc"],
            "chunk_id": chunk_id,
            "doc_version": chunk["v"],
            "confidence_bucket": "high",
            "extraction_run_id": "quality-test",
            "model": "fixture",
            "prompt_hash": "p",
            "source_type": "llm_inferred_graph",
        }

    def ent(eid, name, chunk_id):
        return {
            "entity_id": eid,
            "name": name,
            "normalized_name": name.lower(),
            "type": "team",
            "description": "",
            "provenance": prov(chunk_id),
        }

    valid = {
        "entities": [ent(f"{pack}-a", "Alpha team", chunk["id"]), ent(f"{pack}-b", "Beta team", chunk["id"])],
        "relationships": [
            {
                "source_id": f"{pack}-a",
                "target_id": f"{pack}-b",
                "type": "owns",
                "description": "",
                "confidence": 0.9,
                "retrieval_eligible": True,
                "provenance": prov(chunk["id"]),
            }
        ],
    }
    writer.write_inferred(engine.driver, engine.database, pack=pack, doc_id=chunk["doc"], records=[valid])
    # broken: an orphan entity, and an edge whose evidence chunk does not exist
    engine.driver.execute_query(
        "CREATE (:Entity {entity_id: $p + '-orphan', name: 'Ghost', normalized_name: 'ghost', type: 'team', pack: $p})",
        p=pack,
    )
    engine.driver.execute_query(
        "MATCH (a:Entity {entity_id: $p + '-a'}), (b:Entity {entity_id: $p + '-b'}) "
        "CREATE (a)-[:RELATED {type: 'depends_on', chunk_id: 'gone--000000000000#x', pack: $p, confidence: 0.8, "
        "retrieval_eligible: true, doc_id: 'gone', doc_version: '0', confidence_bucket: 'high', "
        "extraction_run_id: 'old', model: 'fixture', prompt_hash: 'p', source_type: 'llm_inferred_graph'}]->(b)",
        p=pack,
    )


def _facts(engine, pack: str) -> dict:
    rows, _, _ = engine.driver.execute_query(
        "MATCH (c:Chunk {pack: $p, active: true}) WITH count(c) AS chunks "
        "OPTIONAL MATCH (:Entity)-[r:RELATED {pack: $p, chunk_id: $valid_chunk}]->(:Entity) "
        "RETURN chunks, count(r) AS valid_edges",
        p=pack,
        valid_chunk=_valid_chunk(engine, pack),
    )
    return dict(rows[0])


def _valid_chunk(engine, pack):
    rows, _, _ = engine.driver.execute_query(
        "MATCH (c:Chunk {pack: $p, active: true}) RETURN c.chunk_id AS id ORDER BY id LIMIT 1", p=pack
    )
    return rows[0]["id"]


def test_checks_fail_on_orphans_and_dangling_edges_and_pass_after_approved_cleanup(variant, unique):
    defs = build_definitions(variant("base"))
    engine = defs.resources["rag"].engine()
    instance = dg.DagsterInstance.ephemeral()
    assert materialize_pack(defs, instance, engine.pack(unique)).success
    _seed_valid_and_broken(engine, unique)
    report = quality_report(engine.driver, engine.database, [unique])
    assert report["orphan_entities"]["count"] == 1 and report["dangling_edges"]["inferred"] == 1
    before = _facts(engine, unique)
    assert before["valid_edges"] == 1

    checks = defs.resolve_job_def("graph_quality_checks")
    failed = checks.execute_in_process(instance=instance, raise_on_error=False)
    assert not failed.success  # a blocking ERROR check failed the run
    evaluations = {e.check_name: e.passed for e in failed.get_asset_check_evaluations()}
    assert evaluations["no_orphan_entities"] is False and evaluations["no_dangling_edges"] is False
    assert evaluations["no_missing_provenance"] is True

    cleanup = defs.resolve_job_def("graph_cleanup")
    refused = cleanup.execute_in_process(instance=instance, raise_on_error=False)
    assert not refused.success
    assert quality_report(engine.driver, engine.database, [unique])["orphan_entities"]["count"] == 1  # nothing deleted

    dry = cleanup.execute_in_process(
        instance=instance, run_config={"ops": {"cleanup_stale_paths": {"config": {"dry_run": True}}}}
    )
    digest = dry.output_for_node("cleanup_stale_paths")["inputs_hash"]
    approval = {"approved_by": "reviewer@example.org", "reason": "test: seeded orphan and dangling edge"}
    unbound = cleanup.execute_in_process(  # an approval not bound to the dry run's plan approves nothing
        instance=instance, raise_on_error=False, run_config={"ops": {"cleanup_stale_paths": {"config": approval}}}
    )
    assert not unbound.success
    assert quality_report(engine.driver, engine.database, [unique])["orphan_entities"]["count"] == 1
    approved = cleanup.execute_in_process(
        instance=instance,
        run_config={"ops": {"cleanup_stale_paths": {"config": {**approval, "inputs_hash": digest}}}},
    )
    assert approved.success
    removed = approved.output_for_node("cleanup_stale_paths")["removed"]
    assert removed["orphan_entities"] == 1 and removed["dangling_inferred_edges"] == 1, removed

    passed = checks.execute_in_process(instance=instance)
    assert passed.success
    assert all(e.passed for e in passed.get_asset_check_evaluations() if e.check_name.startswith("no_"))
    assert _facts(engine, unique) == before  # current chunks and valid edges untouched
    status = quality_report(engine.driver, engine.database, [unique])["cleanup"]
    # a typed name with no principal configured is marked as such, and the run id is kept
    assert status["approved_by"] == "local:reviewer@example.org" and status["removed"] == 2, (status, removed)
    assert status["run_id"] == approved.run_id


def test_cleanup_without_approval_is_refused_in_the_engine(engine, unique):
    with pytest.raises(CleanupNotApproved):
        run_cleanup(engine.driver, engine.database, [unique], None, run_id="x")


def test_nightly_schedule_targets_the_checks_job():
    defs = build_definitions()
    schedule = defs.resolve_schedule_def("nightly_graph_quality")
    assert schedule.cron_schedule == "0 3 * * *" and schedule.job_name == "graph_quality_checks"
