"""Round two, M6: a document that can never be written, and the steps after a failure.

A 2.3 MB document with 60k sections overran Neo4j's 128 MiB transaction limit in ``chunks``
(one version is one transaction), yet references, chunk_index (131 s of embedding) and
graph_writes each reported "1 done" with 0 chunks stored, and every run redid ~210 s.
"""

from __future__ import annotations

import time

from packs.company_x_kb.pack import CompanyKbPack
from rag_engine.ingest.pipeline import ingest_pack
from rag_engine.packs import ChunkRecord, SourceDocument
from tests.faults.conftest import make_engine
from tests.support.packs import POLICY, RUNBOOK, temp_pack


def sections(n: int) -> str:
    body = "\n\n".join(f"## Section {i}\nRule {i} applies to every laptop." for i in range(n))
    return f"---\ncollection: kb_public\n---\n# Huge\n\n{body}\n"


def _stored(engine, pack: str) -> int:
    rows, _, _ = engine.driver.execute_query("MATCH (c:Chunk {pack: $p}) RETURN count(c) AS n", p=pack)
    return rows[0]["n"]


def test_a_document_with_more_chunks_than_one_transaction_holds_is_refused_before_embedding(
    base_config, unique, tmp_path, neo4j_driver
):
    cfg = base_config.model_copy(
        update={
            "storage": base_config.storage.model_copy(
                update={"neo4j": base_config.storage.neo4j.model_copy(update={"max_chunks_per_document": 40})}
            )
        }
    )
    engine = make_engine(cfg, tmp_path)
    try:
        pack = temp_pack(engine, unique, tmp_path / "corpus", {"huge.md": sections(60), "policy.md": POLICY})
        for run in range(2):
            started = time.perf_counter()
            reports = ingest_pack(engine, pack, extract=False, skip_unchanged=run > 0)
            ((key, reason),) = reports["chunks"].rejected.items()
            assert key.startswith("huge--")
            assert "more than storage.neo4j.max_chunks_per_document (40)" in reason and "split the document" in reason
            for step in ("references", "chunk_index", "graph_writes"):
                assert key in reports[step].skipped and key not in reports[step].done, step
            assert [k.split("--")[0] for k in reports["graph_writes"].done] == (["policy"] if run == 0 else [])
            assert time.perf_counter() - started < 60
        rows, _, _ = engine.driver.execute_query(
            "MATCH (c:Chunk {pack: $p, doc_id: 'huge'}) RETURN count(c) AS n", p=unique
        )
        assert rows[0]["n"] == 0
    finally:
        engine.close()


class _UnindexableKey(CompanyKbPack):
    """A pack whose chunker gives one document's chunk a reference key longer than Neo4j can
    index: the chunks write of that document fails in the store (a failure, not a rejection)."""

    def chunk(self, doc: SourceDocument) -> list[ChunkRecord]:
        chunks = super().chunk(doc)
        if doc.doc_id != "runbook":
            return chunks
        first = chunks[0].model_copy(update={"keys": (*chunks[0].keys, "runbook:" + "x" * 9000)})
        return [first, *chunks[1:]]


def test_later_steps_skip_a_partition_that_failed_at_an_earlier_step(fault_engine, unique, tmp_path):
    shipped = temp_pack(fault_engine, unique, tmp_path / "corpus", {"policy.md": POLICY, "runbook.md": RUNBOOK})
    pack = _UnindexableKey(shipped.entry, shipped.manifest, shipped.root)
    reports = ingest_pack(fault_engine, pack, extract=False)
    ((key, why),) = reports["chunks"].failed.items()
    assert key.startswith("runbook--") and "too large to index" in why
    for step in ("references", "chunk_index", "graph_writes"):
        report = reports[step]
        assert report.skipped.get(key) == "failed at chunks; re-run after fixing that", (step, report.skipped)
        assert key not in report.done and key not in report.failed, step
        assert [k.split("--")[0] for k in report.done] == ["policy"], step
    assert _stored(fault_engine, unique) == len(shipped.chunk(_doc(shipped, "policy.md")))


def _doc(pack, name: str) -> SourceDocument:
    from rag_engine.ingest.documents import discover, load_document

    ref = next(r for r in discover(pack) if r.path.name == name)
    return load_document(pack, ref.partition_key, max_bytes=10_000_000)
