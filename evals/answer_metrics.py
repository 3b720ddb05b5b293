"""What the user reads, measured: does the answer state the fact, is a found answer refused, is an
out-of-scope question answered; and every system's ranking metrics per pack and split.

- **fact stated**: the answer (not a refusal) holds one of the question's ``fact`` phrases, case
  and spacing folded (questions without a ``fact`` are not counted);
- **found but refused**: an answerable question whose gold passage was in the context, answered
  "insufficient evidence", over the answerable questions whose gold was in the context;
- **out of scope answered**: a question that has no answer for its role (out of scope, or only in a
  collection the role may not read), answered, over those questions;
- **rank 1**: an answerable question's first ranked passage is gold.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from evals.metrics import system_metrics
from evals.report import QueryResult
from rag_engine.retrieval.answer import Answer


def _fold(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def facts(value: Any) -> tuple[str, ...] | None:
    """A golden question's ``fact``: one phrase or a list of alternatives; None when absent."""
    if value is None:
        return None
    items = [value] if isinstance(value, str) else list(value)
    out = tuple(str(v) for v in items if str(v).strip())
    return out or None


def states(answer_text: str, phrases: Sequence[str]) -> bool:
    text = _fold(answer_text)
    return any(_fold(p) in text for p in phrases)


def fact_fields(value: Any, answer: Answer) -> dict[str, Any]:
    """The ``fact`` and ``fact_stated`` of a query's result (both None without a fact)."""
    phrases = facts(value)
    if phrases is None:
        return {"fact": None, "fact_stated": None}
    return {"fact": phrases, "fact_stated": (not answer.insufficient_evidence) and states(answer.text, phrases)}


def _rate(hits: int, n: int) -> float | None:
    return round(hits / n, 4) if n else None


def answer_rates(queries: Sequence[QueryResult]) -> dict[str, Any]:
    answerable = [q for q in queries if not q.expect_insufficient]
    with_fact = [q for q in answerable if q.fact_stated is not None]
    seen = [q for q in answerable if _gold_seen(q)]
    no_answer = [q for q in queries if q.expect_insufficient]
    return {
        "answerable": len(answerable),
        "rank1": _rate(sum(1 for q in answerable if q.ranked and q.ranked[0] in q.gold), len(answerable)),
        "fact_questions": len(with_fact),
        "fact_stated": _rate(sum(1 for q in with_fact if q.fact_stated), len(with_fact)),
        "gold_retrieved": len(seen),
        "found_but_refused": _rate(sum(1 for q in seen if q.answered_insufficient), len(seen)),
        "no_answer_questions": len(no_answer),
        "out_of_scope_answered": _rate(sum(1 for q in no_answer if not q.answered_insufficient), len(no_answer)),
    }


def _gold_seen(q: QueryResult) -> bool:
    """The gold passage was in what the engine ranked (its top k, which the context holds)."""
    return bool(q.refused_found) or bool(set(q.ranked) & set(q.gold))


def split_tables(
    rows: dict[str, dict[str, list[tuple[Sequence[str], Sequence[str], bool]]]], results: Sequence[QueryResult]
) -> dict[str, dict[str, Any]]:
    """``<pack>@<split>`` (and ``<pack>@<split>:reference`` / ``:plain``, the questions that name a
    reference and the others) -> {systems, answers}, in key order."""
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(rows):
        pack, rest = key.rsplit("@", 1)
        split, _, group = rest.partition(":")  # group: "reference" (names a rule/article) or "plain"
        queries = [
            q
            for q in results
            if q.pack.split("/", 1)[0] == pack
            and q.split == split
            and (not group or (group == "reference") == bool(q.names_reference))
        ]
        out[key] = {
            "systems": {s: system_metrics(r) for s, r in rows[key].items() if r},
            "answers": answer_rates(queries),
        }
    return out
