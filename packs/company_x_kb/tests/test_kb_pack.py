"""Behaviour of the Company X knowledge base pack on its real corpus, loaded through the config."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from rag_engine import yaml_safe
from rag_engine.config import load_config
from rag_engine.errors import PackError
from rag_engine.packs import SourceDocument, content_hash, load_pack, make_chunk

ROOT = Path(__file__).parents[3]
PACK = "company_x_kb"


def _document(pack, doc_id: str, text: str, source_path: str = "inline.md") -> SourceDocument:
    title, collection, language = pack.describe_document(doc_id, text)
    return SourceDocument(
        pack="company_x_kb",
        doc_id=doc_id,
        version=content_hash(text)[:12],
        title=title,
        text=text,
        collection=collection,
        language=language,
        source_path=source_path,
    )


def _documents(pack) -> list[SourceDocument]:
    """Discover documents the way the engine does: manifest glob, content-hash version."""
    return [
        _document(pack, path.stem, path.read_text(encoding="utf-8"), path.relative_to(pack.root).as_posix())
        for path in sorted(pack.corpus_dir.glob(pack.manifest.document_glob))
    ]


@pytest.fixture(scope="module")
def config():
    return load_config(ROOT / "config" / "engine.yaml")


@pytest.fixture(scope="module")
def entry(config):
    return config.pack(PACK)


@pytest.fixture(scope="module")
def pack(entry):
    return load_pack(entry, ROOT)


@pytest.fixture(scope="module")
def docs(pack):
    return _documents(pack)


@pytest.fixture(scope="module")
def chunks(pack, docs):
    return [c for d in docs for c in pack.chunk(d)]


@pytest.fixture(scope="module")
def by_anchor(chunks):
    return {c.anchor: c for c in chunks}


def test_manifest_matches_config_entry(entry, pack):
    assert entry is not None and entry.enabled
    for field in ("domain", "version", "reference_types", "languages", "collections"):
        assert getattr(pack.manifest, field) == getattr(entry, field), field
    assert pack.manifest.default_collection == "kb_internal"  # fail closed
    assert type(pack).__name__ == "CompanyKbPack"


def test_corpus_has_public_and_internal_documents(docs):
    assert len(docs) >= 12
    collections = Counter(d.collection for d in docs)
    assert collections["kb_public"] >= 4 and collections["kb_internal"] >= 6
    by_id = {d.doc_id: d for d in docs}
    assert by_id["pol-009-holiday-and-leave"].collection == "kb_public"
    assert by_id["rb-1-incident-response"].collection == "kb_internal"
    assert by_id["pol-007-expense"].title == "Expense Policy"


def test_internal_document_chunks_carry_internal_collection(by_anchor, chunks):
    internal = [c for c in chunks if c.doc_id == "rb-1-incident-response"]
    assert internal and {c.collection for c in internal} == {"kb_internal"}
    public = [c for c in chunks if c.doc_id == "pol-018-engineering-handbook"]
    assert public and {c.collection for c in public} == {"kb_public"}
    # every ticket is internal
    assert {c.collection for c in chunks if c.doc_id.startswith("tck-")} == {"kb_internal"}


def test_front_matter_decides_collection_and_fails_closed(pack):
    public = "---\nid: POL-100\ncollection: kb_public\n---\n# T\n\n## A\n\ntext\n"
    assert pack.describe_document("d", public)[1] == "kb_public"
    assert pack.describe_document("d", "# T\n\n## A\n\ntext\n")[1] == "kb_internal"
    with pytest.raises(PackError, match="collection 'legal_public' is not one of"):
        pack.describe_document("d", "---\ncollection: legal_public\n---\n# T\n")
    with pytest.raises(PackError, match="front matter is not valid YAML"):
        pack.describe_document("d", "---\ncollection: [unclosed\n---\n# T\n")


def test_sections_become_chunks_with_slug_ids(by_anchor):
    c = by_anchor["pol-007-expense#approval-limits"]
    assert c.heading == "Expense Policy \u2014 Approval limits"
    assert c.text.startswith("Expenses up to 100 EUR per item")
    assert "## " not in c.text and "---" not in c.text and "collection:" not in c.text
    assert "pol-001-information-security#passwords-and-multi-factor-authentication" in by_anchor
    # a document's introduction is its own chunk
    assert by_anchor["rb-1-incident-response#intro"].text.startswith("Use this runbook")


def test_document_id_is_a_key_of_its_first_chunk_only(pack, docs):
    for doc in docs:
        doc_chunks = pack.chunk(doc)
        assert doc_chunks[0].keys, doc.doc_id
        assert all(not c.keys for c in doc_chunks[1:]), doc.doc_id
    first = {d.doc_id: pack.chunk(d)[0].keys for d in docs}
    assert first["pol-012-access-control"] == ("policy:pol-012",)
    assert first["rb-2-on-call"] == ("runbook:rb-2",)
    assert first["tck-1187"] == ("ticket:tck-1187",)


def test_a_document_owns_its_front_matter_id(pack, docs):
    """The id names the document (the engine rejects another document answering to it); every
    corpus document owns exactly its first chunk's key, and no two own the same one."""
    owned = {d.doc_id: pack.owned_keys(d) for d in docs}
    assert owned["pol-012-access-control"] == ("policy:pol-012",)
    assert all(owned[d.doc_id] == pack.chunk(d)[0].keys for d in docs)
    keys = [k for ks in owned.values() for k in ks]
    assert len(keys) == len(set(keys))
    assert pack.owned_keys(_document(pack, "no-id", "# No id\n\nText.\n")) == ()


def test_chunk_ids_unique_and_stable_across_runs(entry, chunks):
    assert len({c.chunk_id for c in chunks}) == len(chunks)
    fresh = load_pack(entry, ROOT)
    again = [c for d in _documents(fresh) for c in fresh.chunk(d)]
    assert [(c.chunk_id, c.content_hash, c.keys, c.collection) for c in again] == [
        (c.chunk_id, c.content_hash, c.keys, c.collection) for c in chunks
    ]


def test_duplicate_headings_and_long_sections(pack):
    body = (
        "---\nid: RB-9\ncollection: kb_internal\n---\n# Runbook nine\n\n## Steps\n\nfirst\n\n"
        "## Steps\n\nsecond\n\n## Long\n\n" + "\n\n".join(f"Paragraph {i} " + "word " * 60 for i in range(12))
    )
    doc = _document(pack, "rb-9", body)
    small = type(pack)(pack.entry, pack.manifest.model_copy(update={"max_chunk_chars": 400}), pack.root)
    got = small.chunk(doc)
    locals_ = [c.anchor.split("#", 1)[1] for c in got]
    assert locals_[:3] == ["steps", "steps-2", "long"]
    assert locals_[3] == "long-2" and len(locals_) == len(set(locals_))
    assert all(len(c.text) <= 400 for c in got)
    assert got[0].keys == ("runbook:rb-9",)
    long_parts = [c for c in got if c.anchor.split("#")[1].startswith("long")]
    assert " ".join(c.text for c in long_parts).split() == body.split("## Long", 1)[1].split()


def test_bad_documents_raise_pack_error(pack):
    with pytest.raises(PackError, match="no text"):
        pack.chunk(_document(pack, "empty", "---\ncollection: kb_public\n---\n"))
    with pytest.raises(PackError, match="front matter id 'HR-7'"):
        pack.chunk(_document(pack, "bad-id", "---\nid: HR-7\n---\n# T\n\n## A\n\nx\n"))


def test_references_extracted_and_normalized(pack, by_anchor):
    refs = {
        (r.ref_type, r.normalized, r.raw)
        for r in pack.extract_references(by_anchor["pol-001-information-security#roles-and-responsibilities"])
    }
    assert ("runbook", "runbook:rb-1", "RB-1") in refs
    assert ("policy", "policy:pol-012", "POL-012") in refs
    ticket = pack.extract_references(by_anchor["rb-4-vpn-setup#troubleshooting"])
    assert [(r.ref_type, r.normalized) for r in ticket] == [("ticket", "ticket:tck-1042")]
    chunk = by_anchor["rb-4-vpn-setup#troubleshooting"]
    assert chunk.text[ticket[0].start : ticket[0].end] == "TCK-1042"


def test_normalizer_canonical_forms_and_allowed_types(pack):
    doc = _document(pack, "x", "---\ncollection: kb_public\n---\n# X\n")
    chunk = make_chunk(
        doc, 0, "a", "A", "See POL-12, pol-13, RB-03, TCK-981 and HR-7; also XPOL-1.", ("policy:pol-099",)
    )
    assert [r.normalized for r in pack.extract_references(chunk)] == [
        "policy:pol-012",
        "runbook:rb-3",
        "ticket:tck-0981",
    ]
    self_ref = make_chunk(doc, 0, "a", "A", "This is POL-099.", ("policy:pol-099",))
    assert pack.extract_references(self_ref) == []
    narrow = type(pack)(pack.entry, pack.manifest.model_copy(update={"reference_types": ("ticket",)}), pack.root)
    assert [r.ref_type for r in narrow.extract_references(chunk)] == ["ticket"]


def test_reference_resolution_counts(pack, chunks):
    started = time.perf_counter()
    refs = [r for c in chunks for r in pack.extract_references(c)]
    elapsed = time.perf_counter() - started
    keys = {k for c in chunks for k in c.keys}
    resolved = [r for r in refs if r.normalized in keys]
    unresolved = sorted({r.normalized for r in refs if r.normalized not in keys})
    print(
        f"\n[kb] documents={len({c.doc_id for c in chunks})} chunks={len(chunks)} references={len(refs)} "
        f"resolved={len(resolved)} unresolved={len(refs) - len(resolved)} {unresolved} "
        f"extract_seconds={elapsed:.4f}"
    )
    assert len(resolved) >= 25
    assert len(resolved) / len(refs) >= 0.8
    # documents cite ids the knowledge base does not hold (retired policy, an unwritten runbook)
    assert "runbook:rb-3" in unresolved and "policy:pol-002" in unresolved
    assert {r.ref_type for r in refs} == {"policy", "runbook", "ticket"}


def test_golden_queries_point_at_existing_readable_anchors(config, pack, by_anchor):
    data = yaml_safe.load_file(pack.fixtures_dir / "queries.yaml")
    assert data["pack"] == PACK
    queries = data["queries"]
    assert len({q["id"] for q in queries}) == len(queries)
    answerable = [q for q in queries if not q["insufficient_evidence"]]
    insufficient = [q for q in queries if q["insufficient_evidence"]]
    assert len(answerable) >= 12 and len(insufficient) >= 2
    for q in answerable:
        assert q["gold"], q["id"]
        readable = set(config.roles[q["role"]])
        for anchor in q["gold"]:
            assert anchor in by_anchor, (q["id"], anchor)
            assert by_anchor[anchor].collection in readable, (q["id"], anchor, q["role"])
    for q in insufficient:
        assert q["gold"] == [] and q["role"] in config.roles, q["id"]
