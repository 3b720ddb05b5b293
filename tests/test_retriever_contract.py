"""The retriever contract (rag_engine/retrieval/leg.py): every leg is a class behind one
interface, composed by ``retrieval.legs``; a new leg is a class registered by name plus config,
with no edit of ``retrieve()``."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from rag_engine.config import RetrievalConfig
from rag_engine.errors import ConfigError
from rag_engine.retrieval.leg import Leg, Question, build_legs, register_leg
from rag_engine.retrieval.retriever import retrieve

QUESTION = "right to erasure of personal data"


@register_leg("lexical_tail")
class LexicalTailLeg(Leg):
    """Test-only leg: the fulltext leg's hits, worst first (it runs after the lexical leg)."""

    def search(self, q: Question, t: dict[str, Any]) -> list[dict[str, Any]]:
        rows = list(reversed(q.rows.get("lexical", [])))
        t["hits"] = len(rows)
        return rows


def _with_retrieval(engine, **section: Any):
    """``engine`` over the same store with the retrieval section changed through validation, as
    a config file would change it."""
    retrieval = RetrievalConfig.model_validate({**engine.cfg.retrieval.model_dump(), **section})
    return engine.sibling(engine.cfg.model_copy(update={"retrieval": retrieval}))


def test_the_built_in_legs_are_the_configured_default():
    assert [leg.name for leg in build_legs(RetrievalConfig().legs)] == ["exact", "lexical", "dense", "live", "graph"]


def test_a_leg_is_added_by_config_alone(ingested_engine):
    base = retrieve(ingested_engine, QUESTION, "legal_analyst", k=20, rerank=False)
    lexical = next(s for s in base.trace if s["step"] == "lexical")
    assert lexical["hits"] >= 3  # enough hits for the tail to differ from the head
    legs = [*ingested_engine.cfg.retrieval.legs, "lexical_tail"]
    engine = _with_retrieval(ingested_engine, legs=legs, weights={"lexical_tail": 5.0})
    added = retrieve(engine, QUESTION, "legal_analyst", k=20, rerank=False)

    steps = [s["step"] for s in added.trace]
    assert steps.index("lexical_tail") == steps.index("planner") + 1 + ("traversal" in steps)
    assert steps.index("lexical_tail") < steps.index("fusion")
    tail = next(s for s in added.trace if s["step"] == "lexical_tail")
    assert tail["hits"] == lexical["hits"] and tail["weight"] == 5.0
    fusion = next(s for s in added.trace if s["step"] == "fusion")
    assert fusion["weights"]["lexical_tail"] == 5.0
    # the leg is fused by rank like any other: its rank-1 row (the lexical leg's last) now leads
    assert added.candidates[0].sources[-1] == "lexical_tail"
    assert [c.chunk_id for c in added.candidates] != [c.chunk_id for c in base.candidates]
    assert all("lexical_tail" not in c.sources for c in base.candidates)


def test_a_leg_left_out_of_config_does_not_run(ingested_engine):
    engine = _with_retrieval(ingested_engine, legs=["exact", "lexical", "dense", "live"])
    result = retrieve(engine, QUESTION, "legal_analyst", k=5)
    steps = [s["step"] for s in result.trace]
    assert "planner" not in steps and "traversal" not in steps and result.plan is None
    assert result.candidates


def test_an_unknown_leg_is_a_config_error_before_any_store_query():
    with pytest.raises(ConfigError, match="unknown retrieval legs \\['no_such_leg'\\]"):
        build_legs(["lexical", "no_such_leg"])
    with pytest.raises(ValidationError, match="unknown retrieval legs"):
        RetrievalConfig.model_validate({"weights": {"no_such_leg": 1.0}})
    # a weight for a configured leg is accepted
    assert RetrievalConfig.model_validate({"legs": ["lexical", "lexical_tail"], "weights": {"lexical_tail": 2.0}})


def test_a_name_is_registered_once():
    class Other(Leg):
        pass

    with pytest.raises(ConfigError, match="registered twice"):
        register_leg("lexical")(Other)
