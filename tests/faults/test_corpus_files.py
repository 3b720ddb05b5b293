"""Items 9, 12, 14: which files of a corpus are documents, and under which id.

- 9: two file names mapping to one doc id: neither was ingested and the error was false
  ("superseded"). Now the first in sorted order is the document, the other is rejected, saying why.
- 12: links were followed out of the corpus (a system file was ingested); hidden files were
  ingested; the NUL check only saw the first 64 KB.
- 14: names with no ASCII letters all became doc id ``document`` and collided.
"""

from __future__ import annotations

import os
from pathlib import Path

from rag_engine.ingest.documents import discover, doc_id_for
from rag_engine.ingest.pipeline import ingest_pack
from tests.support.packs import RUNBOOK, temp_pack


def doc(title: str, body: str) -> str:
    return f"---\ncollection: kb_internal\n---\n# {title}\n\n## Section\n{body}\n"


def _docs_in_graph(engine, pack: str) -> dict[str, str]:
    rows, _, _ = engine.driver.execute_query(
        "MATCH (c:Chunk {pack: $p, active: true}) RETURN c.doc_id AS doc, c.text AS text ORDER BY doc", p=pack
    )
    out: dict[str, str] = {}
    for r in rows:
        out[r["doc"]] = out.get(r["doc"], "") + r["text"]
    return out


def _by_doc(mapping: dict[str, str]) -> dict[str, str]:
    return {k.split("--")[0]: v for k, v in mapping.items()}


def test_two_names_for_one_doc_id_first_sorted_wins_the_other_is_rejected_truthfully(fault_engine, unique, tmp_path):
    files = {
        "lost device.md": doc("Lost device", "Report it within one hour."),
        "lost_device.md": doc("Lost device (copy)", "A different text under a colliding name."),
    }
    assert {doc_id_for(Path(n)) for n in files} == {"lost_device"}
    pack = temp_pack(fault_engine, unique, tmp_path / "corpus", files)
    for _ in range(2):  # deterministic: the same file wins every run
        reports = ingest_pack(fault_engine, pack, extract=False)
        ((_key, reason),) = reports["source_documents"].rejected.items()
        assert "lost_device.md: maps to document id 'lost_device'" in reason and "lost device.md" in reason, reason
        assert "rename lost_device.md" in reason and "superseded" not in reason
        assert [_k.split("--")[0] for _k in reports["graph_writes"].done] == ["lost_device"]
        assert "one hour" in _docs_in_graph(fault_engine, unique)["lost_device"]
    # without include_rejected the conflicting file is simply not a document
    assert [r.path.name for r in discover(pack)] == ["lost device.md"]


def test_links_out_of_the_corpus_are_rejected_and_never_read(fault_engine, unique, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.md"
    secret.write_text(doc("Secret", "SENTINEL-OUTSIDE-CORPUS must never be ingested."), encoding="utf-8")
    pack = temp_pack(
        fault_engine,
        unique,
        tmp_path / "corpus",
        {"runbook.md": RUNBOOK, "inside.md": doc("Inside", "Linked from within the corpus.")},
    )
    corpus = tmp_path / "corpus"
    os.symlink(secret, corpus / "passwd.md")
    os.symlink(corpus / "inside.md", corpus / "alias.md")  # a link inside the corpus is fine

    reports = ingest_pack(fault_engine, pack, extract=False)
    rejected = _by_doc(reports["source_documents"].rejected)
    assert set(rejected) == {"passwd"}
    assert "resolves outside the corpus root" in rejected["passwd"]
    graph = _docs_in_graph(fault_engine, unique)
    assert sorted(graph) == ["alias", "inside", "runbook"]
    assert not any("SENTINEL-OUTSIDE-CORPUS" in text for text in graph.values())
    key = next(k for k in reports["source_documents"].rejected)
    assert "SENTINEL" not in (Path(fault_engine.artifacts.path(unique, key, "source")).read_text())


def test_hidden_files_are_skipped(fault_engine, unique, tmp_path):
    pack = temp_pack(
        fault_engine,
        unique,
        tmp_path / "corpus",
        {"runbook.md": RUNBOOK, ".draft.md": doc("Draft", "An editor's unsaved draft.")},
    )
    reports = ingest_pack(fault_engine, pack, extract=False)
    assert not reports["source_documents"].rejected
    assert sorted(_docs_in_graph(fault_engine, unique)) == ["runbook"]
    assert [r.path.name for r in discover(pack, include_rejected=True)] == ["runbook.md"]


def test_a_nul_byte_after_the_first_64_kb_rejects_the_document(fault_engine, unique, tmp_path):
    text = doc("Big", "word " * 16_000)  # ~80 KB of text
    assert len(text) > 70_000
    pack = temp_pack(
        fault_engine,
        unique,
        tmp_path / "corpus",
        {"runbook.md": RUNBOOK, "big.md": text.encode() + b"\x00\x01\x02 binary tail"},
    )
    reports = ingest_pack(fault_engine, pack, extract=False)
    rejected = _by_doc(reports["source_documents"].rejected)
    assert set(rejected) == {"big"} and "looks binary (NUL bytes)" in rejected["big"]
    assert sorted(_docs_in_graph(fault_engine, unique)) == ["runbook"]


def test_non_ascii_names_get_distinct_stable_ids(fault_engine, unique, tmp_path):
    files = {
        "отчёт.md": doc("Report", "Quarterly report."),
        "счёт.md": doc("Invoice", "An invoice."),
        "規則.md": doc("Rules", "House rules."),
        "café.md": doc("Cafe", "Opening hours."),
    }
    ids = {name: doc_id_for(Path(name)) for name in files}
    assert len(set(ids.values())) == 4 and "document" not in ids.values()
    assert ids["café.md"] == "cafe"  # transliterated where ASCII has a form
    assert ids == {name: doc_id_for(Path(name)) for name in files}  # stable
    pack = temp_pack(fault_engine, unique, tmp_path / "corpus", files)
    reports = ingest_pack(fault_engine, pack, extract=False)
    assert not reports["source_documents"].rejected, reports["source_documents"].rejected
    assert sorted(_docs_in_graph(fault_engine, unique)) == sorted(ids.values())
