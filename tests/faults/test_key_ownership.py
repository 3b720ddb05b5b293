"""Item 11: a document's own reference key (a KB id) cannot be taken over by another document.

The probe: a public page with front matter ``id: POL-012`` answered to the internal policy's key
too, so `rag query "POL-012" --role public` returned the impostor first and every citation of
POL-012 linked to both documents. Now the document already holding the key keeps it, the later
claimant is rejected at chunking with the reason (and skipped downstream), the owner re-ingests
as before, `rag quality` reports a conflict found in the graph and `rag packs lint` one in a corpus.
"""

from __future__ import annotations

import json
import os
import re

from rag_engine.config import load_config
from rag_engine.graph.quality import quality_report
from rag_engine.ingest.pipeline import ingest_pack
from rag_engine.ops.pack_lint import lint_packs
from rag_engine.retrieval.query import run_query
from tests.conftest import ROOT
from tests.faults.conftest import make_engine
from tests.support.cli import rag
from tests.support.packs import POLICY

KEY = "policy:pol-900"

IMPOSTOR = """---
id: POL-900
collection: kb_public
---
# POL-900 laptop policy (public summary)

## Summary
POL-900 says laptops need no encryption and lost devices need not be reported.
"""


def _doc(key: str) -> str:
    return key.split("--")[0]


def _hash_embedder(text: str) -> str:  # no embedding server here: the built-in embedder
    if os.environ.get("RAG_EMBED_ENDPOINT"):
        return text
    return re.sub(r"(?m)^(  embedding_model: )\S+", r"\g<1>hash-embed-384", text)


def _answering(engine, pack: str) -> list[str]:
    rows, _, _ = engine.driver.execute_query(
        "MATCH (:RefKey {key: $k})<-[:ANSWERS_TO]-(c:Chunk) RETURN collect(DISTINCT c.doc_id) AS docs",
        k=f"{pack}|{KEY}",
    )
    return sorted(rows[0]["docs"])


def _reference_targets(engine, pack: str) -> list[str]:
    rows, _, _ = engine.driver.execute_query(
        "MATCH (:Chunk {pack: $p})-[e:REFERENCES {normalized: $n}]->(t:Chunk) RETURN collect(DISTINCT t.doc_id) AS d",
        p=pack,
        n=KEY,
    )
    return sorted(rows[0]["d"])


def test_a_later_claimant_of_an_owned_key_is_rejected_and_the_owner_keeps_it(variant, unique, tmp_path):
    path = variant("base", edit=_hash_embedder)
    corpus = tmp_path / "corpus"  # the variant's corpus: policy.md (POL-900, internal) and runbook.md
    engine = make_engine(load_config(path), tmp_path)
    try:
        pack = engine.pack(unique)
        first = ingest_pack(engine, pack, extract=False)
        assert not first["chunks"].rejected
        assert _answering(engine, unique) == ["policy"]

        (corpus / "impostor.md").write_text(IMPOSTOR, encoding="utf-8")
        reports = ingest_pack(engine, pack, extract=False)
        chunks = reports["chunks"]
        assert [_doc(k) for k in chunks.rejected] == ["impostor"]
        key, reason = next(iter(chunks.rejected.items()))
        assert KEY in reason and "'policy' owns" in reason, reason
        assert engine.artifacts.read(unique, key, "chunks")["rejected"] == reason  # recorded like item 1
        assert sorted(_doc(k) for k in chunks.done) == ["policy", "runbook"]  # the owner re-ingests fine
        for step in ("references", "chunk_index", "graph_writes"):
            assert [_doc(k) for k in reports[step].skipped] == ["impostor"], step
            assert reports[step].failed == {}, step

        assert _answering(engine, unique) == ["policy"]
        assert _reference_targets(engine, unique) == ["policy"]  # RB-77 cites POL-900: the owner only

        public = run_query(engine, "POL-900", "public", generate=False, local_inference=False)
        ids = [c.chunk_id for c in (*public.retrieval.candidates, *public.retrieval.expansions)]
        assert not [i for i in ids if i.startswith(f"{unique}:impostor")], ids
        employee = run_query(engine, "POL-900", "employee", generate=False, local_inference=False)
        top = employee.retrieval.candidates[0]
        assert top.chunk_id.startswith(f"{unique}:policy--") and top.exact

        # the owner's new version keeps its key; the claimant stays rejected
        (corpus / "policy.md").write_text(POLICY + "\n## Review\nReviewed yearly.\n", encoding="utf-8")
        again = ingest_pack(engine, pack, extract=False)
        assert [_doc(k) for k in again["chunks"].rejected] == ["impostor"]
        assert "policy" in {_doc(k) for k in again["chunks"].done}
        assert _answering(engine, unique) == ["policy"]

        # the owner leaves the corpus: its key is released and the next claimant takes it
        (corpus / "policy.md").unlink()
        released = ingest_pack(engine, pack, extract=False)
        assert not released["chunks"].rejected
        rows, _, _ = engine.driver.execute_query(
            "MATCH (c:Chunk {pack: $p, active: true})-[:ANSWERS_TO]->(:RefKey {key: $k}) "
            "RETURN collect(DISTINCT c.doc_id) AS d",
            p=unique,
            k=f"{unique}|{KEY}",
        )
        assert rows[0]["d"] == ["impostor"]
        assert quality_report(engine.driver, engine.database, [unique])["key_conflicts"]["count"] == 0
    finally:
        engine.close()


def test_among_new_documents_the_first_in_doc_id_order_keeps_the_key(fault_engine, unique, tmp_path):
    from tests.support.packs import temp_pack

    copy = POLICY.replace("# Laptop policy", "# Laptop policy (copy)")
    pack = temp_pack(fault_engine, unique, tmp_path / "corpus", {"b-policy.md": copy, "a-policy.md": POLICY})
    reports = ingest_pack(fault_engine, pack, extract=False)
    assert [_doc(k) for k in reports["chunks"].rejected] == ["b-policy"]
    assert "'a-policy' owns" in next(iter(reports["chunks"].rejected.values()))
    assert _answering(fault_engine, unique) == ["a-policy"]


def test_quality_reports_an_injected_conflict_and_fails(variant, unique, tmp_path):
    path = variant("base", edit=_hash_embedder)
    engine = make_engine(load_config(path), tmp_path)
    try:
        ingest_pack(engine, engine.pack(unique), extract=False)
        assert quality_report(engine.driver, engine.database, [unique])["key_conflicts"]["count"] == 0
        # a graph written before ownership existed: another document's active chunk answers the key
        engine.driver.execute_query(
            "MATCH (k:RefKey {key: $k}) "
            "CREATE (:Chunk {chunk_id: $p + ':legacy--0#intro', pack: $p, doc_id: 'legacy', active: true})"
            "-[:ANSWERS_TO]->(k)",
            p=unique,
            k=f"{unique}|{KEY}",
        )
        conflicts = quality_report(engine.driver, engine.database, [unique])["key_conflicts"]
        assert conflicts == {
            "count": 1,
            "sample": [{"pack": unique, "key": KEY, "owners": ["policy"], "others": ["legacy"]}],
        }
    finally:
        engine.close()

    res = rag("--config", path, "quality", "--json")
    assert res.exit_code == 1, res.output
    data = json.loads(res.stdout)
    assert "no_key_conflicts" in data["blocking_failures"]
    assert data["key_conflicts"]["count"] == 1
    text = rag("--config", path, "quality")
    assert text.exit_code == 1
    assert f"key conflict [{unique}] {KEY}: owned by policy, also legacy" in text.stdout


def test_pack_lint_lists_a_conflict_in_the_corpus_as_an_error(variant, unique, tmp_path):
    path = variant("base")
    (tmp_path / "corpus" / "impostor.md").write_text(IMPOSTOR, encoding="utf-8")
    cfg = load_config(path)
    report = lint_packs(cfg, ROOT, unique)
    found = [f for f in report.findings if f.code == "key_conflict"]
    assert len(found) == 1 and found[0].severity == "error" and found[0].where == "policy.md"
    assert KEY in found[0].message and "impostor (first in doc id order) owns" in found[0].message
