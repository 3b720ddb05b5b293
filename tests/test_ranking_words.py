"""Word-level ranking pieces, pure functions (no store): stems and stopwords, the planner's
relationship and entity matching on words, the evidence floor, graph-only candidates below
exact hits, and the reranker's features."""

from __future__ import annotations

import json

import pytest

from rag_engine.errors import ConfigError
from rag_engine.graph.planner import Seed, asks_relationship, distinct_entities
from rag_engine.retrieval.candidates import Candidate
from rag_engine.retrieval.context import DocumentItem
from rag_engine.retrieval.evidence import AliasGroups, evidence_coverage
from rag_engine.retrieval.rerank import FEATURES, load_model, text_features
from rag_engine.retrieval.retriever import protect_exact
from rag_engine.text.terms import content_stems, content_words

GDPR_RELATIONS = frozenset({"oblig", "grant", "restrict", "supervis", "refer", "exempt", "appli", "relat", "between"})


def test_question_frame_and_single_letters_are_not_content():
    assert content_words("How long does Company X keep customer support tickets?") == [
        "company",
        "keep",
        "customer",
        "support",
        "tickets",
    ]
    assert content_words("What must the controller do under Article 33?") == ["controller", "article", "33"]


def test_stems_meet_other_word_forms():
    assert content_stems("notifying breaches") == content_stems("notified breach") == {"notifi", "breach"}
    assert "ticket" in content_stems("tickets") and "ticket" in content_stems("ticket")


def test_a_word_inside_an_entity_name_does_not_ask_a_relationship():
    # 'supervisory' starts with the verb stem 'supervis' ('supervises'): a prefix is not a word
    assert not asks_relationship(
        "Tell me about the supervisory authority in detail", GDPR_RELATIONS, ["supervisory authority"]
    )
    assert asks_relationship("Which authority supervises the processor?", GDPR_RELATIONS, ["processor"])
    assert asks_relationship("How does the controller relate to the processor?", GDPR_RELATIONS, ["controller"])
    # the relationship word inside a matched name ('right to restriction') does not count either
    assert not asks_relationship("What is the right to restriction?", GDPR_RELATIONS, ["right to restriction"])


def seed(name: str) -> Seed:
    return Seed(entity_id=name, name=name, pack="p", score=1.0)


def test_an_entity_named_inside_another_is_one_entity():
    kept = distinct_entities([seed("supervisory authority"), seed("authority"), seed("controller")])
    assert [s.name for s in kept] == ["supervisory authority", "controller"]
    assert [s.name for s in distinct_entities([seed("authority")])] == ["authority"]


def doc(text: str, heading: str = "", title: str = "", exact: bool = False) -> DocumentItem:
    return DocumentItem(
        number=1,
        chunk_id="p:d--v#x",
        anchor="d#x",
        doc_id="d",
        heading=heading,
        collection="c",
        text=text,
        sources=("lexical",),
        doc_title=title,
        exact=exact,
        tokens=1,
    )


def test_evidence_floor_counts_stems_headings_titles_and_aliases():
    aliases = AliasGroups.build([{"Data Protection Officer": ("DPO",)}])
    runbook = doc(
        "Inform the Data Protection Officer within 24 hours of discovery of any incident that may be a "
        "personal data breach.",
        heading="Security and data breach incidents",
        title="Incident response runbook",
    )
    question = "Under the incident response runbook, when must the DPO be told about a possible personal data breach?"
    # without titles and aliases the block holds few of the question's words
    assert evidence_coverage(question, [runbook], AliasGroups.build([])) < 0.8
    assert evidence_coverage(question, [runbook], aliases) >= 0.75
    tickets = doc("| Customer support tickets | 3 years | ticket closure |", heading="Retention periods")
    assert evidence_coverage("How long does Company X keep customer support tickets?", [tickets], aliases) >= 0.5
    assert evidence_coverage("What is the capital of France?", [tickets], aliases) == 0.0
    assert evidence_coverage("what is it?", [tickets], aliases) == 1.0  # nothing to cover
    assert evidence_coverage("capital of France", [doc("x", exact=True)], aliases) == 1.0


def candidate(cid: str, sources: tuple[str, ...], exact: bool = False) -> Candidate:
    return Candidate(
        chunk_id=cid,
        anchor=cid,
        doc_id="d",
        heading="",
        text="t",
        collection="c",
        score=0.1,
        sources=sources,
        exact=exact,
    )


def test_graph_only_candidates_never_rank_above_an_exact_hit():
    ranked = [
        candidate("g1", ("graph",)),
        candidate("l1", ("lexical", "graph")),
        candidate("e1", ("exact_reference",), exact=True),
        candidate("g2", ("graph",)),
        candidate("d1", ("dense",)),
    ]
    assert [c.chunk_id for c in protect_exact(ranked)] == ["l1", "e1", "g1", "g2", "d1"]
    no_exact = [candidate("g1", ("graph",)), candidate("l1", ("lexical",))]
    assert protect_exact(no_exact) == no_exact


def test_text_features_read_coverage_proximity_and_phrases():
    near = text_features(
        ["except", "right", "erasur"], "", "Right to erasure", "The right to erasure shall not apply ..."
    )
    assert near["heading_cov"] == pytest.approx(2 / 3) and near["text_cov"] == pytest.approx(2 / 3)
    assert near["proximity"] == 1.0 and near["bigram_cov"] == 0.5
    far = text_features(["right", "erasur"], "", "", "right " + "word " * 30 + "erasure")
    assert 0 < far["proximity"] < 0.1


def test_rerank_weights_are_checked(tmp_path):
    path = tmp_path / "rerank.json"
    path.write_text(json.dumps({"version": "v", "features": ["nonsense"], "weights": [1.0]}))
    with pytest.raises(ConfigError, match="unknown features"):
        load_model(path)
    with pytest.raises(ConfigError):
        load_model(tmp_path / "missing.json")
    path.write_text(json.dumps({"version": "v", "features": list(FEATURES), "weights": [0.0] * len(FEATURES)}))
    assert load_model(path).score({"fused": 3.0}) == 0.0


def test_the_graph_tail_adds_what_fusion_ranked_below_k_in_the_last_places():
    from rag_engine.retrieval.retriever import with_graph_tail

    pool = [
        candidate("e1", ("exact_reference",), exact=True),
        candidate("l1", ("lexical", "dense")),
        candidate("l2", ("lexical",)),
        candidate("l3", ("dense",)),
        candidate("g1", ("graph",)),
        candidate("g2", ("graph",)),
        candidate("g3", ("dense", "graph")),
    ]
    assert [c.chunk_id for c in with_graph_tail(pool, 4, 2)] == ["e1", "l1", "g1", "g2"]
    assert [c.chunk_id for c in with_graph_tail(pool, 4, 0)] == ["e1", "l1", "l2", "l3"]
    assert [c.chunk_id for c in with_graph_tail(pool, 4, 3)] == ["e1", "g1", "g2", "g3"]
    # an exact hit is never dropped for graph evidence
    exact_only = [candidate(f"e{i}", ("exact_reference",), exact=True) for i in range(3)] + pool[4:]
    assert [c.chunk_id for c in with_graph_tail(exact_only, 3, 2)] == ["e0", "e1", "e2"]
    # a graph-only chunk already in the top k counts against the tail
    assert [c.chunk_id for c in with_graph_tail(pool[1:], 4, 1)] == ["l1", "l2", "l3", "g1"]
