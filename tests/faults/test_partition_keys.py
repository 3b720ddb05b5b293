"""Round two, H1: a partition key is a folder name; it must never walk out of the artifacts.

Dagster accepts nearly any string as a dynamic partition. A key ``../../../../outside/planted--...``
materialized for chunks read a ``source.json`` planted outside the corpus and served it to
``--role public``; ``source_documents`` with such a key wrote outside ``var/artifacts``.
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from rag_engine.errors import BadPartitionKey
from rag_engine.ingest.documents import discover, doc_id_for
from rag_engine.ingest.pipeline import ingest_pack
from rag_engine.retrieval.query import run_query
from rag_engine.store.artifacts import ArtifactStore
from rag_engine.store.partition_keys import check
from tests.support.packs import POLICY, temp_pack

CANARY = "PLANTEDCANARY"


def _plant(outside: Path, pack: str, doc_id: str, version: str) -> bytes:
    outside.mkdir(parents=True, exist_ok=True)
    target = outside / "source.json"
    target.write_text(
        json.dumps(
            {
                "pack": pack,
                "doc_id": doc_id,
                "version": version,
                "title": "Planted",
                "text": f"# Notice\n\n## Notice\n{CANARY} laptops may stay unencrypted, says nobody.\n",
                "collection": "kb_public",
                "language": "en",
                "source_path": "planted.md",
            }
        )
    )
    return target.read_bytes()


def _outside(tmp_path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tmp_path)): p.read_bytes() for p in (tmp_path / "outside").rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "key",
    [
        "../../../../outside/planted--aaaaaaaaaaaa",
        "../planted--aaaaaaaaaaaa",
        "a/b--aaaaaaaaaaaa",
        ".hidden--aaaaaaaaaaaa",
        "..--aaaaaaaaaaaa",
        "planted--AAAAAAAAAAAA",
        "planted--aaaa",
        "planted--../../x",
        "x" * 300 + "--aaaaaaaaaaaa",
        "planted\x00--aaaaaaaaaaaa",
    ],
)
def test_malformed_keys_are_refused_by_the_key_check_and_the_artifact_store(key, tmp_path):
    with pytest.raises(BadPartitionKey):
        check(key)
    store = ArtifactStore(tmp_path / "artifacts")
    with pytest.raises(BadPartitionKey):
        store.write("pack", key, "source", {"x": 1})
    with pytest.raises(BadPartitionKey):
        store.read("pack", key, "source")
    assert not any(tmp_path.rglob("*.json"))


def test_every_key_the_corpus_makes_is_valid(tmp_path):
    names = ["policy.md", "_.x.md", "-dash.md", "a..b.md", "отчёт-1.md", "ﷺ" * 40 + ".md", "~.md", "a b c.md"]
    for name in names:
        check(f"{doc_id_for(Path(name))}--0123456789ab")


def test_an_artifact_path_through_a_linked_folder_out_of_the_root_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "artifacts"
    root.mkdir()
    (root / "pack").symlink_to(outside, target_is_directory=True)
    with pytest.raises(BadPartitionKey, match="resolves outside"):
        ArtifactStore(root).write("pack", "doc--0123456789ab", "source", {"x": 1})
    assert not any(outside.rglob("*"))


def test_a_traversing_key_serves_nothing_and_writes_nothing_outside(fault_engine, unique, tmp_path):
    pack = temp_pack(fault_engine, unique, tmp_path / "corpus", {"policy.md": POLICY})
    root = fault_engine.artifacts.base
    depth = len(root.resolve().relative_to(tmp_path.resolve()).parts) + 1  # from artifacts/<pack> up to tmp_path
    key = "../" * depth + "outside/planted--aaaaaaaaaaaa"
    planted = _plant(tmp_path / "outside" / "planted--aaaaaaaaaaaa", unique, "planted", "aaaaaaaaaaaa")
    good = [r.partition_key for r in discover(pack)]
    reports = ingest_pack(fault_engine, pack, keys=[*good, key], extract=False)

    assert "partition key" in reports["source_documents"].rejected[key]
    for step in ("chunks", "references", "chunk_index", "graph_writes"):
        assert key not in reports[step].done, step
        assert set(reports[step].done) == set(good), step
    result = run_query(fault_engine, f"{CANARY} laptops unencrypted", role="public", k=10, generate=False)
    assert all(CANARY not in c.text for c in result.retrieval.candidates)
    rows, _, _ = fault_engine.driver.execute_query(
        "MATCH (c:Chunk {pack: $p}) WHERE c.text CONTAINS $canary RETURN count(c) AS n", p=unique, canary=CANARY
    )
    assert rows[0]["n"] == 0
    # source_documents wrote no rejection record outside the root (over the plant or beside it)
    assert _outside(tmp_path) == {"outside/planted--aaaaaaaaaaaa/source.json": planted}


def test_an_artifact_of_another_document_is_refused_under_this_key(fault_engine, unique, tmp_path):
    """A source.json copied (or planted) into a well-formed partition folder: its identity must
    match the key, so the chunks step (run alone, as a Dagster partition run does) refuses it."""
    from rag_engine.errors import DocumentError
    from rag_engine.ingest.steps import chunks_step

    pack = temp_pack(fault_engine, unique, tmp_path / "corpus", {"policy.md": POLICY})
    key = "planted--aaaaaaaaaaaa"
    _plant(fault_engine.artifacts.path(unique, key, "source").parent, unique, "someone_else", "bbbbbbbbbbbb")
    with pytest.raises(DocumentError, match="artifact is of another document"):
        chunks_step(fault_engine, pack, key)
    rows, _, _ = fault_engine.driver.execute_query("MATCH (c:Chunk {pack: $p}) RETURN count(c) AS n", p=unique)
    assert rows[0]["n"] == 0


def test_dagster_materializing_a_traversing_partition_is_rejected_without_touching_outside(variant, unique, tmp_path):
    from rag_assets.definitions import build_definitions

    defs = build_definitions(variant("base"))
    instance = dg.DagsterInstance.ephemeral()
    engine = defs.resources["rag"].engine()
    depth = len(engine.artifacts.base.resolve().relative_to(tmp_path.resolve()).parts) + 1
    key = "../" * depth + "outside/planted--aaaaaaaaaaaa"
    planted = _plant(tmp_path / "outside" / "planted--aaaaaaaaaaaa", unique, "planted", "aaaaaaaaaaaa")
    instance.add_dynamic_partitions(f"{unique}__document_versions", [key])  # what the UI's "add partition" does
    job = defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection={dg.AssetKey([unique, "source_documents"]), dg.AssetKey([unique, "chunks"])}
    )
    run = job.execute_in_process(instance=instance, partition_key=key, raise_on_error=False)
    # a rejected document is a data outcome, not a crash: the WARN check says why, nothing is written
    (check,) = [c for c in run.get_asset_check_evaluations() if c.check_name == "documents_valid"]
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert "1 document version(s) rejected at source_documents" in (check.description or ""), check.description
    outcomes = {
        e.asset_key.path[-1]: e.event_specific_data.materialization.metadata["outcome"].value
        for e in run.get_asset_materialization_events()
    }
    assert outcomes == {"source_documents": "rejected", "chunks": "rejected"}, outcomes
    assert _outside(tmp_path) == {"outside/planted--aaaaaaaaaaaa/source.json": planted}
    rows, _, _ = engine.driver.execute_query("MATCH (c:Chunk {pack: $p}) RETURN count(c) AS n", p=unique)
    assert rows[0]["n"] == 0
