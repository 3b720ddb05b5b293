"""The demo replay cassette: heuristic FIXTURE answers for every chunk, valid and clearly labelled.

No Neo4j and no network: the corpus is read from disk and the cassette from the repository.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.cassettes import build_demo_cassette as builder
from evals.cassettes.grounded_answerer import ANSWER_SOURCE, LABEL, context_blocks, grounded_draft, parse_draft
from evals.cassettes.grounded_answerer import REPORTED_MODEL as ANSWER_MODEL
from evals.cassettes.heuristic_extractor import (
    FIXTURE_SOURCE,
    MAX_ENTITIES,
    MAX_RELATIONSHIPS,
    WEAK_CONFIDENCE,
    heuristic_extraction,
)
from rag_engine.engine import Engine
from rag_engine.graph.entity_resolution import EntityResolver
from rag_engine.graph.extraction import build_messages, prompt_hash, validate
from rag_engine.graph.models import RawExtraction
from rag_engine.providers.clients import build_client
from rag_engine.providers.replay import Cassette

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo_engine() -> Engine:
    return Engine.from_path(root=ROOT, env={})


@pytest.fixture(scope="module")
def chunks(demo_engine):
    return list(builder.iter_chunks(demo_engine))


@pytest.fixture(scope="module")
def committed(demo_engine) -> Path:
    path = builder.cassette_path(demo_engine)
    assert path.is_file(), "evals/cassettes/demo.jsonl is missing: python -m evals.cassettes.build_demo_cassette"
    return path


def _chunk(chunks, pack_name: str, anchor: str):
    return next(c for p, c in chunks if p.name == pack_name and c.anchor == anchor)


def _pack(demo_engine, name):
    return demo_engine.packs[name]


# -- (1) heuristic output passes the same validation as a model's ------------------------------


def test_every_chunk_validates_with_zero_rejections(demo_engine, chunks):
    assert {p.name for p, _ in chunks} == {"legal_regulatory", "company_x_kb"}
    totals = {"entities": 0, "relationships": 0}
    for pack, chunk in chunks:
        raw = heuristic_extraction(pack.name, pack.manifest, chunk)
        validated = validate(
            raw,
            chunk,
            pack.manifest,
            EntityResolver(pack.name, pack.manifest.aliases),
            demo_engine.cfg.graph,
            run_id="test",
            model="fixture",
            prompt=prompt_hash(pack.manifest),
        )
        assert validated.rejected == {}, (chunk.chunk_id, validated.rejected)
        assert len(validated.entities) == len(raw.entities)  # no two names resolve to one entity
        assert len(validated.relationships) == len(raw.relationships)
        assert len(raw.entities) <= MAX_ENTITIES and len(raw.relationships) <= MAX_RELATIONSHIPS
        assert "chunk_id" not in raw.model_dump_json()  # the engine knows the chunk; the answer does not repeat it
        names = {e.name for e in raw.entities}
        assert all(r.source in names and r.target in names for r in raw.relationships)
        totals["entities"] += len(raw.entities)
        totals["relationships"] += len(raw.relationships)
    assert totals["entities"] > len(chunks) and totals["relationships"] > 0


def test_legal_rules_on_real_chunks(demo_engine, chunks):
    legal = _pack(demo_engine, "legal_regulatory")
    # Article 12(4): controller, data subject, right to lodge a complaint, supervisory authority
    raw = heuristic_extraction(legal.name, legal.manifest, _chunk(chunks, legal.name, "gdpr-ch03#art12-p4"))
    by_name = {e.name: e.type for e in raw.entities}
    assert by_name["controller"] == "actor" and by_name["supervisory authority"] == "authority"
    assert by_name["right to lodge a complaint"] == "right"
    rels = {(r.source, r.type, r.target): r.confidence for r in raw.relationships}
    assert rels[("right to lodge a complaint", "applies_to", "data subject")] == 0.8
    # plain co-occurrence is kept, but below the retrieval floor
    weak = [r for r in raw.relationships if r.type == "refers_to"]
    assert weak and all(r.confidence == WEAK_CONFIDENCE < demo_engine.cfg.graph.confidence_floor for r in weak)


def test_kb_rules_on_real_chunks(demo_engine, chunks):
    kb = _pack(demo_engine, "company_x_kb")
    raw = heuristic_extraction(
        kb.name, kb.manifest, _chunk(chunks, kb.name, "pol-001-information-security#roles-and-responsibilities")
    )
    rels = {(r.source, r.type, r.target) for r in raw.relationships}
    assert ("CISO", "owns", "Information Security Policy") in rels  # "The CISO owns this policy"
    assert all(r.type in kb.manifest.relationship_types for r in raw.relationships)
    assert {e.type for e in raw.entities} <= set(kb.manifest.entity_types)


def test_heuristic_is_deterministic_and_cue_words_need_their_entities(demo_engine, chunks):
    legal = _pack(demo_engine, "legal_regulatory")
    pack, chunk = next((p, c) for p, c in chunks if p.name == legal.name)
    assert heuristic_extraction(pack.name, pack.manifest, chunk) == heuristic_extraction(
        pack.name, pack.manifest, chunk
    )
    # "supervisory" inside an entity name is not a supervision cue; "monitor" in the sentence is
    plain = chunk.model_copy(update={"text": "The supervisory authority and the controller met."})
    assert {r.type for r in heuristic_extraction(pack.name, pack.manifest, plain).relationships} == {"refers_to"}
    cued = chunk.model_copy(update={"text": "The supervisory authority shall monitor the processor."})
    rels = heuristic_extraction(pack.name, pack.manifest, cued).relationships
    assert [(r.source, r.type, r.target, r.confidence) for r in rels] == [
        ("supervisory authority", "supervises", "processor", 0.85)
    ]


# -- (2) the committed cassette answers every current chunk -----------------------------------


def test_committed_cassette_covers_every_current_chunk(demo_engine, committed, chunks):
    cassette = Cassette(committed)
    missing = builder.missing_chunks(demo_engine, cassette)
    assert missing == [], (
        f"{len(missing)} chunk(s) have no cassette entry (corpus edited without a rebuild?): "
        "run python -m evals.cassettes.build_demo_cassette"
    )
    entries = [json.loads(line) for line in committed.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(cassette) == len(entries)
    assert sum(not builder.is_answer_entry(e) for e in entries) == len(chunks)
    assert builder.main(["--check"]) == 0


def test_check_fails_loudly_on_a_stale_cassette(demo_engine, chunks, committed, tmp_path, capsys):
    stale = tmp_path / "stale.jsonl"
    lines = committed.read_text(encoding="utf-8").splitlines()
    stale.write_text("\n".join(lines[1:]) + "\n", encoding="utf-8")  # drop the first chunk's entry
    missing = builder.missing_chunks(demo_engine, Cassette(stale))
    assert missing == [chunks[0][1].chunk_id]


def test_replay_client_answers_a_real_extraction_request(demo_engine, chunks):
    spec = demo_engine.registry.extraction
    client = build_client(spec, root=demo_engine.root, env={})
    for pack_name in ("legal_regulatory", "company_x_kb"):
        pack, chunk = next((p, c) for p, c in chunks if p.name == pack_name)
        result = client.generate(build_messages(pack.manifest, chunk), schema=RawExtraction, purpose="graph_extraction")
        assert isinstance(result.parsed, RawExtraction)
        assert result.parsed == heuristic_extraction(pack.name, pack.manifest, chunk)
        assert result.usage.reported_model == builder.REPORTED_MODEL
        assert result.usage.input_tokens > 0 and result.usage.cached_input_tokens == 0  # first of its pack


def _keys(path: Path, *, answers: bool | None = None) -> list[str]:
    entries = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [e["key"] for e in entries if answers is None or builder.is_answer_entry(e) == answers]


def test_rebuild_gives_the_same_keys(demo_engine, committed, tmp_path):
    rebuilt = tmp_path / "rebuilt.jsonl"
    stats = builder.build(demo_engine, rebuilt)
    extraction = _keys(committed, answers=False)
    assert _keys(rebuilt) == extraction
    assert stats["entries"] == len(extraction) and stats["bytes"] < 3_000_000
    builder.build(demo_engine, rebuilt)  # from scratch: no duplicated lines
    assert _keys(rebuilt) == extraction


def test_rebuilding_extraction_keeps_the_recorded_answers(demo_engine, committed, tmp_path):
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(committed.read_bytes())
    stats = builder.build(demo_engine, copy)
    assert stats["answers_kept"] == len(_keys(committed, answers=True)) > 0
    assert _keys(copy) == _keys(committed)  # extraction entries first, then the answers, as committed


# -- (3) every entry is labelled as fixture data ----------------------------------------------


def test_every_entry_is_labelled_fixture(committed):
    entries = [json.loads(line) for line in committed.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert entries
    seen_cached = False
    answers = [e for e in entries if builder.is_answer_entry(e)]
    assert answers  # the golden questions replay offline
    for entry in answers:
        # golden answers, and the `make demo` question's answer recorded on the demo's own store
        assert entry["fixture"] is True and entry["source"] in (ANSWER_SOURCE, builder.DEMO_SOURCE)
        assert entry["reported_model"] == ANSWER_MODEL and entry["operation"] == "chat.completions"
        draft = parse_draft(entry["response"]["text"])
        assert draft.model_dump(mode="json") == entry["response"]["parsed"]
        if not draft.insufficient_evidence:
            assert draft.answer.startswith(LABEL) and draft.citations
    for entry in (e for e in entries if not builder.is_answer_entry(e)):
        assert entry["fixture"] is True
        assert entry["source"] == FIXTURE_SOURCE
        assert entry["operation"] == "chat.completions"
        raw = RawExtraction.model_validate_json(entry["response"]["text"])
        assert raw.model_dump(mode="json") == entry["response"]["parsed"]
        assert all(e.description.startswith("heuristic fixture") for e in raw.entities)
        assert all(r.description.startswith("heuristic fixture") for r in raw.relationships)
        seen_cached = seen_cached or (entry["usage"]["cached_input_tokens"] or 0) > 0
    assert seen_cached  # later calls of a pack count the shared system prompt as cached


# -- (4) the fixture answerer cites only blocks the prompt holds ------------------------------


def _prompt(question: str, blocks: list[tuple[str, str]]) -> str:
    from rag_engine.retrieval.answer import INSTRUCTIONS

    rendered = "\n\n".join(
        f"[{n}] chunk_id={cid} doc={cid.split('#')[0]} anchor={cid.split(':')[-1]} | heading\n{text}"
        for n, (cid, text) in enumerate(blocks, start=1)
    )
    return f"{INSTRUCTIONS}\n\nContext:\n{rendered}\n\nQuestion: {question}"


def test_fixture_answer_cites_only_context_blocks_and_says_when_they_do_not_answer():
    blocks = [
        ("p:doc#a", "The data subject has the right to erasure of personal data. It applies without delay."),
        ("p:doc#b", "Erasure of personal data is also called the right to be forgotten."),
        ("p:doc#c", "Unrelated text about fees."),
    ]
    question, parsed = context_blocks(_prompt("What is the right to erasure of personal data?", blocks))
    assert question == "What is the right to erasure of personal data?" and [c for c, _ in parsed] == [
        "p:doc#a",
        "p:doc#b",
        "p:doc#c",
    ]
    assert parsed[0][1] == blocks[0][1]
    draft = grounded_draft(question, parsed)
    assert draft.citations == ["p:doc#a", "p:doc#b"] and not draft.insufficient_evidence
    assert draft.answer == f"{LABEL} {blocks[0][1]}"
    off_topic = grounded_draft("Which cat breeds shed least?", parsed)
    assert off_topic.insufficient_evidence and off_topic.citations == []
