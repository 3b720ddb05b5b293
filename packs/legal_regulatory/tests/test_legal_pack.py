"""Behaviour of the GDPR pack on its real corpus, loaded through the real config entry."""

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
PACK = "legal_regulatory"


def _documents(pack) -> list[SourceDocument]:
    """Discover documents the way the engine does: manifest glob, content-hash version."""
    docs = []
    for path in sorted(pack.corpus_dir.glob(pack.manifest.document_glob)):
        text = path.read_text(encoding="utf-8")
        title, collection, language = pack.describe_document(path.stem, text)
        docs.append(
            SourceDocument(
                pack=pack.name,
                doc_id=path.stem,
                version=content_hash(text)[:12],
                title=title,
                text=text,
                collection=collection,
                language=language,
                source_path=path.relative_to(pack.root).as_posix(),
            )
        )
    return docs


@pytest.fixture(scope="module")
def entry():
    return load_config(ROOT / "config" / "engine.yaml").pack(PACK)


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


def _refs(pack, chunk):
    return {(r.normalized, r.raw) for r in pack.extract_references(chunk)}


def test_manifest_matches_config_entry(entry, pack):
    assert entry is not None and entry.enabled
    for field in ("domain", "version", "reference_types", "languages", "collections"):
        assert getattr(pack.manifest, field) == getattr(entry, field), field
    assert pack.manifest.default_collection in pack.manifest.collections
    assert type(pack).__name__ == "LegalRegulatoryPack"
    assert pack.name == PACK


def test_corpus_documents_and_notice(pack, docs):
    names = sorted(d.doc_id for d in docs)
    assert names[:11] == [f"gdpr-ch{n:02d}" for n in range(1, 12)]
    assert [n for n in names if "recitals" in n] == [
        "gdpr-recitals-001-050",
        "gdpr-recitals-051-100",
        "gdpr-recitals-101-150",
        "gdpr-recitals-151-173",
    ]
    assert len(docs) == 15
    notice = pack.corpus_dir / "NOTICE.md"
    assert notice.is_file() and "CC-BY-4.0" in notice.read_text(encoding="utf-8")
    assert "NOTICE" not in names  # the glob keeps the licence notice out of the documents
    for d in docs:
        assert len(d.text.encode("utf-8")) < 150_000, d.doc_id
        assert d.collection == "legal_public" and d.language == "en"
    titles = {d.doc_id: d.title for d in docs}
    assert titles["gdpr-ch02"] == "Chapter II \u2014 Principles"


def test_chunk_ids_unique_and_stable_across_runs(entry, docs, chunks):
    ids = [c.chunk_id for c in chunks]
    assert len(ids) == len(set(ids))
    assert len({c.anchor for c in chunks}) == len(chunks)
    fresh = load_pack(entry, ROOT)  # a second, independent pack instance
    again = [c for d in _documents(fresh) for c in fresh.chunk(d)]
    assert [(c.chunk_id, c.content_hash, c.keys) for c in again] == [
        (c.chunk_id, c.content_hash, c.keys) for c in chunks
    ]
    for c in chunks:
        assert c.chunk_id == f"legal_regulatory:{c.doc_id}--{c.doc_version}#{c.anchor.split('#', 1)[1]}"


def test_every_chunk_has_keys_and_fits(pack, chunks):
    limit = pack.manifest.max_chunk_chars
    for c in chunks:
        assert c.keys, c.anchor
        assert 0 < len(c.text) <= limit, c.anchor
    keys = {k for c in chunks for k in c.keys}
    assert {f"article:{n}" for n in range(1, 100)} <= keys
    assert {f"recital:{n}" for n in range(1, 174)} <= keys
    assert {f"chapter:{n}" for n in range(1, 12)} <= keys
    print(
        f"\n[legal] documents={len({c.doc_id for c in chunks})} chunks={len(chunks)} "
        f"split_parts={sum(1 for c in chunks if '(part ' in c.heading)}"
    )


def test_paragraph_chunk_carries_points_heading_and_keys(by_anchor):
    p1 = by_anchor["gdpr-ch02#art5-p1"]
    assert p1.heading == "Article 5(1) \u2014 Principles relating to processing of personal data"
    assert p1.text.startswith("1. Personal data shall be:")
    assert "\n(a) processed lawfully" in p1.text and "\n(f) processed in a manner" in p1.text
    assert p1.keys == ("article:5(1)", "article:5", "chapter:2")  # first chunk of Chapter II
    p2 = by_anchor["gdpr-ch02#art5-p2"]
    assert p2.keys == ("article:5(2)",)
    # an unnumbered subparagraph belongs to the paragraph before it
    assert "Point (f) of the first subparagraph" in by_anchor["gdpr-ch02#art6-p1"].text
    # an article without numbered paragraphs is one chunk answering to the article
    assert by_anchor["gdpr-ch02#art10"].keys == ("article:10",)
    # the first chunk of a chapter answers to the chapter
    assert "chapter:3" in by_anchor["gdpr-ch03#art12-p1"].keys
    assert by_anchor["gdpr-recitals-001-050#rec12"].keys == ("recital:12",)
    assert by_anchor["gdpr-recitals-001-050#rec12"].heading == "Recital 12"


def test_long_paragraph_split_keeps_keys(pack, docs, by_anchor):
    first, second = by_anchor["gdpr-ch05#art49-p1"], by_anchor["gdpr-ch05#art49-p1-2"]
    assert first.keys == second.keys == ("article:49(1)", "article:49")
    assert first.heading.endswith("(part 1 of 2)") and second.heading.endswith("(part 2 of 2)")

    small = type(pack)(pack.entry, pack.manifest.model_copy(update={"max_chunk_chars": 400}), pack.root)
    ch02 = next(d for d in docs if d.doc_id == "gdpr-ch02")
    big, tiny = pack.chunk(ch02), small.chunk(ch02)
    assert len(tiny) > len(big)
    assert all(len(c.text) <= 400 for c in tiny)
    parts = [c for c in tiny if c.anchor.startswith("gdpr-ch02#art5-p1")]
    assert parts[0].anchor == "gdpr-ch02#art5-p1" and parts[1].anchor == "gdpr-ch02#art5-p1-2"
    assert {c.keys for c in parts} == {("article:5(1)", "article:5", "chapter:2")}
    # splitting loses no words
    whole = by_anchor["gdpr-ch02#art5-p1"].text.split()
    assert " ".join(c.text for c in parts).split() == whole


def test_known_references_are_extracted_and_normalized(pack, by_anchor):
    assert ("article:23(1)", "Article 23(1)") in _refs(pack, by_anchor["gdpr-ch02#art6-p4"])
    assert ("directive:95/46/ec", "Directive 95/46/EC") in _refs(pack, by_anchor["gdpr-ch11#art94-p1"])
    # relative: "paragraph 1" inside Article 5 means Article 5(1)
    assert ("article:5(1)", "paragraph 1") in _refs(pack, by_anchor["gdpr-ch02#art5-p2"])
    assert ("article:14(1)", "paragraphs 1 and 2") in _refs(pack, by_anchor["gdpr-ch03#art14-p3"])
    assert ("article:14(2)", "paragraphs 1 and 2") in _refs(pack, by_anchor["gdpr-ch03#art14-p3"])
    assert ("article:6(1)", "point (a) of Article 6(1)") in _refs(pack, by_anchor["gdpr-ch02#art8-p1"])
    art12 = _refs(pack, by_anchor["gdpr-ch03#art12-p1"])
    assert {("article:13", "Articles 13 and 14"), ("article:14", "Articles 13 and 14")} <= art12
    assert {f"article:{n}" for n in range(15, 23)} | {"article:34"} <= {n for n, _ in art12}
    assert ("chapter:9", "Chapter IX") in _refs(pack, by_anchor["gdpr-ch02#art6-p2"])
    assert ("regulation:45/2001/ec", "Regulation (EC) No 45/2001") in _refs(pack, by_anchor["gdpr-ch01#art2-p3"])
    for ref in pack.extract_references(by_anchor["gdpr-ch02#art6-p4"]):
        assert by_anchor["gdpr-ch02#art6-p4"].text[ref.start : ref.end] == ref.raw
        assert ref.source_chunk_id == by_anchor["gdpr-ch02#art6-p4"].chunk_id


def _synthetic(pack, text, keys=("article:40(3)",)):
    doc = SourceDocument(
        pack="legal_regulatory",
        doc_id="synthetic",
        version="v1",
        title="t",
        text=text,
        collection="legal_public",
        language="en",
        source_path="synthetic.md",
    )
    return pack.extract_references(make_chunk(doc, 0, "x", "x", text, keys))


def test_normalizer_rules_on_synthetic_text(pack):
    refs = _synthetic(
        pack,
        "Where Article 6(1)(a) applies, see Recital 12 and Regulation (EU) No 1049/2001; "
        "paragraphs 1 and 2 apply, as do Articles 15 to 18; see also Article 83(4), (5) and (6).",
    )
    found = [(r.ref_type, r.normalized, r.raw) for r in refs]
    assert ("article", "article:6(1)", "Article 6(1)(a)") in found
    assert ("recital", "recital:12", "Recital 12") in found
    assert ("regulation", "regulation:1049/2001/eu", "Regulation (EU) No 1049/2001") in found
    assert ("article", "article:40(1)", "paragraphs 1 and 2") in found
    assert ("article", "article:40(2)", "paragraphs 1 and 2") in found
    assert [n for _, n, raw in found if raw == "Articles 15 to 18"] == [
        "article:15",
        "article:16",
        "article:17",
        "article:18",
    ]
    assert [n for _, n, raw in found if raw.startswith("Article 83")] == [
        "article:83(4)",
        "article:83(5)",
        "article:83(6)",
    ]


def test_articles_of_other_instruments_are_not_gdpr_articles(pack):
    refs = _synthetic(
        pack,
        "Article 16 TFEU and Article 8(1) of the Charter, and Article 2 of "
        "Directive 95/46/EC, and Article 25(6) or Article 26(4) of Directive 95/46/EC.",
    )
    assert {r.normalized for r in refs} == {"directive:95/46/ec"}
    # relative paragraphs need a current article; a recital has none
    assert _synthetic(pack, "as referred to in paragraph 2", keys=("recital:5",)) == []
    # a chunk never references itself
    assert _synthetic(pack, "referred to in paragraph 3", keys=("article:40(3)",)) == []


def test_only_manifest_reference_types_are_emitted(pack, by_anchor):
    narrow = type(pack)(pack.entry, pack.manifest.model_copy(update={"reference_types": ("article",)}), pack.root)
    chunk = by_anchor["gdpr-ch11#art94-p2"]  # cites Directive 95/46/EC and articles
    assert {r.ref_type for r in pack.extract_references(chunk)} >= {"directive"}
    assert {r.ref_type for r in narrow.extract_references(chunk)} <= {"article"}
    all_types = {r.ref_type for c in by_anchor.values() for r in pack.extract_references(c)}
    assert all_types <= set(pack.manifest.reference_types)


def test_reference_resolution_counts(pack, chunks):
    started = time.perf_counter()
    refs = [r for c in chunks for r in pack.extract_references(c)]
    elapsed = time.perf_counter() - started
    keys = {k for c in chunks for k in c.keys}
    resolved = [r for r in refs if r.normalized in keys]
    unresolved = [r for r in refs if r.normalized not in keys]
    by_type = Counter(r.ref_type for r in unresolved)
    print(
        f"\n[legal] references={len(refs)} resolved={len(resolved)} unresolved={len(unresolved)} "
        f"unresolved_by_type={dict(by_type)} extract_seconds={elapsed:.3f}"
    )
    assert len(resolved) >= 600
    assert len(resolved) / len(refs) >= 0.9
    # every article and chapter the GDPR cites exists in the corpus; what stays unresolved is other
    # instruments, which must still be extracted
    assert set(by_type) <= {"directive", "regulation"}
    assert Counter(r.normalized for r in unresolved)["directive:95/46/ec"] >= 10
    # the deterministic reference set is the same on every run
    assert [(r.source_chunk_id, r.normalized, r.start) for r in refs] == [
        (r.source_chunk_id, r.normalized, r.start) for c in chunks for r in pack.extract_references(c)
    ]


def test_whole_corpus_chunks_and_extracts_fast(pack, docs):
    started = time.perf_counter()
    chunks = [c for d in docs for c in pack.chunk(d)]
    refs = [r for c in chunks for r in pack.extract_references(c)]
    elapsed = time.perf_counter() - started
    print(f"\n[legal] chunk+extract {len(chunks)} chunks, {len(refs)} references in {elapsed:.3f}s")
    assert elapsed < 2.0


def test_golden_queries_point_at_existing_anchors(pack, by_anchor):
    data = yaml_safe.load_file(pack.fixtures_dir / "queries.yaml")
    assert data["pack"] == PACK
    queries = data["queries"]
    assert len({q["id"] for q in queries}) == len(queries)
    answerable = [q for q in queries if not q["insufficient_evidence"]]
    insufficient = [q for q in queries if q["insufficient_evidence"]]
    assert len(answerable) >= 25 and len(insufficient) >= 3
    for q in answerable:
        assert q["gold"], q["id"]
        missing = [a for a in q["gold"] if a not in by_anchor]
        assert not missing, (q["id"], missing)
    for q in insufficient:
        assert q["gold"] == [], q["id"]


def test_malformed_documents_raise_a_clear_pack_error(pack):
    def doc(text):
        return SourceDocument(
            pack="legal_regulatory",
            doc_id="bad",
            version="v1",
            title="t",
            text=text,
            collection="legal_public",
            language="en",
            source_path="bad.md",
        )

    with pytest.raises(PackError, match="bad: no articles or recitals"):
        pack.chunk(doc(""))
    with pytest.raises(PackError, match="bad:1: expected"):
        pack.chunk(doc("# Something else\n\ntext\n"))
    with pytest.raises(PackError, match="bad:3: unexpected heading"):
        pack.chunk(doc("# Chapter I \u2014 General\n\n## Annex 1\n"))


def test_unsupported_normalizer_version_is_refused(pack):
    from packs.legal_regulatory.pack import build_pack

    with pytest.raises(PackError, match="normalizer_version"):
        build_pack(pack.entry, pack.manifest.model_copy(update={"normalizer_version": "99"}), ROOT)


def test_rules_fingerprint_tracks_manifest(pack):
    other = type(pack)(pack.entry, pack.manifest.model_copy(update={"normalizer_version": "2"}), pack.root)
    assert pack.rules_fingerprint() == type(pack)(pack.entry, pack.manifest, pack.root).rules_fingerprint()
    assert other.rules_fingerprint() != pack.rules_fingerprint()


def test_build_corpus_reproduces_the_committed_corpus(pack, tmp_path):
    from packs.legal_regulatory import build_corpus

    source = ROOT / build_corpus.DEFAULT_SOURCE
    if not source.is_file():
        pytest.skip(f"source corpus not available at {build_corpus.DEFAULT_SOURCE}")
    written = build_corpus.build(source, tmp_path)
    committed = sorted(p.name for p in pack.corpus_dir.glob("gdpr-*.md"))
    assert sorted(p.name for p in written) == committed
    for name in committed:
        assert (tmp_path / name).read_bytes() == (pack.corpus_dir / name).read_bytes(), name
    assert (tmp_path / "NOTICE.md").read_bytes() == (pack.corpus_dir / "NOTICE.md").read_bytes()
