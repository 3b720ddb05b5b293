"""Weighted RRF and exact-hit selection: pure functions, no store."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag_engine.config import RetrievalConfig
from rag_engine.errors import QueryInputError
from rag_engine.retrieval.fusion import fuse
from rag_engine.retrieval.retriever import check_question, exact_hits

ROOT = Path(__file__).resolve().parents[1]


def rows(*ids: str, scores: tuple[float, ...] | None = None) -> list[dict]:
    return [{"chunk_id": c, "score": (scores[i] if scores else 1.0)} for i, c in enumerate(ids)]


def test_ties_are_broken_by_evidence_not_by_id():
    # 'a-dense' is rank 1 of dense, 'z-lex' rank 1 of lexical: equal RRF scores. The id would put
    # 'a-dense' first; the lexical score breaks the tie for the lexical hit instead.
    fused = fuse({"lexical": rows("z-lex", scores=(7.5,)), "dense": rows("a-dense")}, 60)
    assert [f.row["chunk_id"] for f in fused] == ["z-lex", "a-dense"]


def test_best_single_leg_rank_beats_two_weak_ranks_at_equal_score():
    # b: rank 2 and rank 2 (2/62); a: rank 1 in one list only, weight 2 (2/61): a wins on score,
    # and at exactly equal scores the best single-leg rank decides
    fused = fuse({"lexical": rows("x", "b"), "dense": rows("y", "b")}, 60)
    order = [f.row["chunk_id"] for f in fused]
    assert order[0] == "b"  # two legs agree: 2/62 > 1/61
    assert fused[0].best_rank == 2


def test_weight_zero_turns_a_leg_off_and_weights_scale():
    lists = {"lexical": rows("l1", "l2"), "dense": rows("d1", "d2")}
    assert {f.row["chunk_id"] for f in fuse(lists, 60, {"dense": 0.0})} == {"l1", "l2"}
    half = fuse(lists, 60, {"dense": 0.5})
    assert [f.row["chunk_id"] for f in half][:2] == ["l1", "l2"]
    assert half[0].score == pytest.approx(1 / 61)


def test_exact_hits_need_an_unambiguous_key_and_are_capped_and_ranked_lexically():
    key_rows = [
        {"chunk_id": "p:a#1", "pack": "p", "doc_id": "a", "ordinal": 1, "keys": ["p|a:3.8"]},
        {"chunk_id": "p:b#1", "pack": "p", "doc_id": "b", "ordinal": 1, "keys": ["p|3.8"]},
        {"chunk_id": "p:c#1", "pack": "p", "doc_id": "c", "ordinal": 1, "keys": ["p|3.8"]},
        {"chunk_id": "p:a#2", "pack": "p", "doc_id": "a", "ordinal": 2, "keys": ["p|a:3.9"]},
    ]
    docs = {"p|a:3.8": ["p:a"], "p|a:3.9": ["p:a"], "p|3.8": ["p:a", "p:b", "p:c"]}
    lexical = rows("p:a#2", "p:zz")
    exact, ambiguous, ambiguous_docs = exact_hits(key_rows, docs, lexical, limit=5)
    assert [r["chunk_id"] for r in exact] == ["p:a#2", "p:a#1"]  # lexical rank first, then order
    assert ambiguous == ["p|3.8"] and ambiguous_docs == {"p:a", "p:b", "p:c"}
    assert len(exact_hits(key_rows, docs, lexical, limit=1)[0]) == 1


@pytest.mark.parametrize("k", [0, -1, 51])
def test_k_out_of_range_is_an_input_error(k):
    with pytest.raises(QueryInputError, match="k must be between 1 and 50"):
        check_question("question", k, RetrievalConfig())


def test_overlong_and_undecodable_questions_are_input_errors():
    with pytest.raises(QueryInputError, match="limit is 4000"):
        check_question("word " * 1000, None, RetrievalConfig())
    with pytest.raises(QueryInputError, match="not valid text"):
        check_question("caf\udce9?", None, RetrievalConfig())
    assert check_question("fine", None, RetrievalConfig()) == 10


def test_unknown_legs_are_refused_in_config():
    with pytest.raises(ValueError, match="unknown retrieval legs"):
        RetrievalConfig(weights={"sparse": 1.0})
    assert RetrievalConfig(weights={"dense": 0.3}).weights == {"dense": 0.3}
    with pytest.raises(ValueError, match=">= 0"):
        RetrievalConfig(weights={"dense": -1})


def test_dense_default_weight_comes_from_the_active_embedder(base_config):
    from rag_engine.engine import Engine

    engine = Engine(base_config, ROOT, {})
    assert engine.leg_weights["lexical"] == 1.0
    hashed = base_config.model_copy(
        update={"defaults": base_config.defaults.model_copy(update={"embedding_model": "hash-embed-384"})}
    )
    assert Engine(hashed, ROOT, {}).leg_weights["dense"] == 0.0
    pinned = hashed.model_copy(update={"retrieval": hashed.retrieval.model_copy(update={"weights": {"dense": 0.8}})})
    assert Engine(pinned, ROOT, {}).leg_weights["dense"] == 0.8
