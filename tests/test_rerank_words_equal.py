"""The rerank stage's word work gives, bit for bit, what the code before it was made cheaper gave
(``evals.bench.rerank_reference``, a frozen copy of that code): the same tokens, content words and
stems, the same units, the same sentence evidence and the same rerank features, on every chunk of
the shipped packs against their golden questions, and on texts built to reach the corners (words
outside ASCII, a Greek capital sigma, "how long" across a unit boundary, table rows, merged
fragments). Exact equality, no tolerance. No store."""

from __future__ import annotations

import random
import sys
from functools import cache

import numpy as np
import pytest

from evals.bench import rerank_reference as old
from evals.bench.rerank_cpu import DIMENSION, Passage, golden_questions, pack_passages, query_vector
from rag_engine.engine import Engine
from rag_engine.retrieval.rerank import question_stems, text_features
from rag_engine.retrieval.sentence_evidence import evidence_features, score_chunk
from rag_engine.store.units import encode
from rag_engine.text.sentences import MAX_UNITS, split_units
from rag_engine.text.terms import content_stem_list, content_stems, content_words, tokens

QUESTIONS_PER_CHUNK = 3


@cache
def corpus() -> tuple[dict[str, list[Passage]], dict[str, list[str]]]:
    engine = Engine.from_path()
    try:
        passages = pack_passages(engine)
        questions: dict[str, list[str]] = {}
        for pack, question in golden_questions(engine):
            questions.setdefault(pack, []).append(question)
    finally:
        engine.close()
    return passages, questions


def blob_for(text: str, rng: np.random.Generator) -> bytes:
    return encode(rng.standard_normal((min(len(old.split_units(text)), MAX_UNITS), DIMENSION)).tolist(), DIMENSION)


def assert_same(question: str, passages: list[Passage], rng: np.random.Generator, vectors: bool) -> None:
    """Everything the rerank stage computes from words, new against old, for one question."""
    assert question_stems(question) == old.question_stems(question)
    stems = question_stems(question)
    vec = query_vector() if vectors else None
    new_ev, old_ev = {}, {}
    for p in passages:
        blob = blob_for(p.text, rng) if vectors else None
        context = content_stems(f"{p.title} {p.heading}")
        assert context == old.content_stems(f"{p.title} {p.heading}")
        new_ev[p.chunk_id] = score_chunk(p.chunk_id, p.text, context, stems, vec, blob, 0.5)
        old_ev[p.chunk_id] = old.score_chunk(p.chunk_id, p.text, context, stems, vec, blob, 0.5)
        assert new_ev[p.chunk_id] == old_ev[p.chunk_id], (question, p.chunk_id)
        expected = old.text_features(stems, p.title, p.heading, p.text)
        assert text_features(stems, p.title, p.heading, p.text) == expected
        assert text_features(stems, p.title, p.heading, p.text, new_ev[p.chunk_id].words) == expected
    ids = [p.chunk_id for p in passages]
    assert evidence_features(new_ev, ids) == old.evidence_features(old_ev, ids)


def test_every_pack_chunk_against_its_golden_questions_gives_the_old_outputs() -> None:
    passages, questions = corpus()
    rng = np.random.default_rng(40)
    checked = joined = 0
    for pack, chunks in passages.items():
        asked = questions[pack]
        for p in chunks:
            assert split_units(p.text) == old.split_units(p.text), p.chunk_id
            assert tokens(p.text) == old.tokens(p.text)
            assert content_words(p.text) == old.content_words(p.text)
            assert content_stem_list(p.text) == [old.stem(w) for w in old.content_words(p.text)]
            words = score_chunk(p.chunk_id, p.text, set(), [], None, None).words
            assert words is None or words == content_stem_list(p.text), p.chunk_id
            joined += words is not None
        for k in range(0, len(chunks), 20):  # groups of 20 candidates, each against three questions
            group = chunks[k : k + 20]
            for i in range(QUESTIONS_PER_CHUNK):
                question = asked[(k // 20 * QUESTIONS_PER_CHUNK + i) % len(asked)]
                assert_same(question, group, rng, vectors=i == 0)
                checked += len(group)
    assert checked >= 3 * sum(len(c) for c in passages.values())
    assert joined > sum(len(c) for c in passages.values()) / 2  # most chunks' stems come from their units


def test_every_golden_question_gives_the_old_stems() -> None:
    _, questions = corpus()
    for asked in questions.values():
        for question in asked:
            assert question_stems(question) == old.question_stems(question)
            assert content_words(question) == old.content_words(question)


CORNERS = [
    "How long must data be kept? How\nlong. How many tickets, how  many hours: how much? how often, how far",
    "Under the rule, ask how. Long retention applies to logs kept for 3 years and more.",
    "Ask the clerk how\n- long items are kept in the archive for the year\n- many other items",
    "Die Straße ist lang. İstanbul ΟΔΟΣ ΣΟΦΙΑΣ and ΣΑΣ. Café naïve résumé; x_y snake_case 3.5% £40 \u2013 ok.",
    "It\u2019s the controller\u2019s \u201cduty\u201d \u2014 see Art. 33 (a) and e.g. the DPO; "
    "(b) the processor\u2019s duty.",
    "| Data category | Retention period | Starts from |\n| --- | --- | --- |\n"
    "| Customer support tickets | 3 years | ticket closure |\n| Security logs | 24 months | log creation |",
    "Short one.\n| A | B |\n| --- | --- |\n| x | y |\nFinal words of this.",
    "Retention.\n| Category | Period |\n| --- | --- |\n| support tickets kept | long |\nFinal words of this sentence.",
    "Intro:\n\n1. First item of the list holds words.\n2) Second\n(c) third point here now\n\nTail.",
    "\u200eLeft-to-right mark\u200e before words. Ⅻ roman numeral Ⅻ and ½ fraction and ² superscript.",
    "ǅungla ǈ ǋ titlecase; ﬁnance ﬂow ligatures; ß SS ẞ; K kelvin sign; Å angstrom.",
    "A. B. C. D.",
    "",
    "   ",
    "one",
]


@pytest.mark.parametrize("text", CORNERS)
def test_corner_texts_give_the_old_outputs(text: str) -> None:
    assert tokens(text) == old.tokens(text)
    assert content_words(text) == old.content_words(text)
    assert content_stem_list(text) == [old.stem(w) for w in old.content_words(text)]
    assert split_units(text) == old.split_units(text)
    for question in ("How long are tickets kept?", "What is the ΟΔΟΣ rule on Straße data?", "how", ""):
        stems = question_stems(question)
        context = content_stems("Title Heading how")
        new = score_chunk("c", text, context, stems, None, None)
        assert new == old.score_chunk("c", text, context, stems, None, None), text
        assert new.words is None or new.words == content_stem_list(text)
        expected = old.text_features(stems, "Title", "how", text)
        assert text_features(stems, "Title", "how", text) == expected
        assert text_features(stems, "Title", "how", text, new.words) == expected


FRAGMENTS = [
    "How",
    "how",
    "long",
    "many",
    "Ticket",
    "tickets",
    "notified",
    "controller",
    "Article 33",
    "ΣΑΣ",
    "Straße",
    "İ",
    "ﬁ",
    "é",
    "\u2019",
    "\u2013",
    "_",
    "3",
    "x",
    "the",
    "must",
    "between",
    ".",
    ". ",
    "; (b) ",
    "\n",
    "\n\n",
    "\n- ",
    "\n| a | b |\n| --- | --- |\n| c | d |\n",
    "  ",
    "e.g. ",
    "(a) ",
]


def test_random_texts_give_the_old_outputs() -> None:
    rng = random.Random(40)
    questions = ["How long is a ticket kept?", "controller notified between Article 33", "how many ΣΑΣ x"]
    for _ in range(3000):
        text = " ".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 40)))
        assert tokens(text) == old.tokens(text), text
        assert content_words(text) == old.content_words(text), text
        assert split_units(text) == old.split_units(text), text
        stems = question_stems(rng.choice(questions))
        context = content_stems(rng.choice(["", "how", "Ticket retention"]))
        new = score_chunk("c", text, context, stems, None, None)
        assert new == old.score_chunk("c", text, context, stems, None, None), text
        assert new.words is None or new.words == content_stem_list(text), text
        assert text_features(stems, "t", "h", text) == old.text_features(stems, "t", "h", text), text
        assert text_features(stems, "t", "h", text, new.words) == old.text_features(stems, "t", "h", text), text


def test_whitespace_is_never_a_word_character() -> None:
    """What lets a unit's collapsed text ("a  b" shown as "a b") hold the tokens of its span."""
    word = old._TOKEN.fullmatch
    assert [c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace() and word(c)] == []
