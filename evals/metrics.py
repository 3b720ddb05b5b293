"""Per-query retrieval and answer metrics, and their aggregation into a report's ``metrics``.

Relevance is binary on chunk *anchors* (``<doc_id>#<local>``, stable across document versions):
an anchor in the gold list is relevant, anything else is not. Decisions worth knowing:

- **Duplicates in the ranking** count once, at their first position: a gold anchor retrieved
  twice (e.g. from two document versions) is one hit, so recall, nDCG and AP never exceed 1;
  the repeat still takes its rank (it is a non-relevant position, as it would be to a reader).
- **MAP@10** is the mean over queries of AP@10 = sum over the gold hits in the top 10 of
  precision at that hit's rank, divided by ``min(|gold|, 10)``: the most a top 10 can hold, so a
  perfect top 10 scores 1 even with more than 10 gold anchors (the TREC convention divides by
  ``|gold|``; capping keeps AP on the same scale as nDCG@10's ideal).
- **Expected-insufficient queries** (no gold) get ``None`` for recall/MRR/nDCG and citation hit:
  ranking quality is undefined without gold, and 0 would punish a system for correctly finding
  nothing. They are scored by ``insufficient_correct`` alone.
- **Citation hit** for an answerable query is 1 if any cited anchor is gold, else 0, *including*
  when nothing was cited (an uncited answer or a wrong "insufficient evidence"). ``None`` there
  would shrink the denominator and let a system that stops citing keep its rate.
- **Aggregates** are means over the non-null per-query values (``None`` if there are none).
- **Latency** p50/p95 use numpy's default (linear) percentile over all queries.
- **Cost per query** is the exact Decimal mean as text, or ``None`` if *any* query's cost is
  unknown: unknown is never zero, and a mean over the known subset would understate the cost.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np

from evals.report import METRIC_NAMES, TOP_K, QueryResult
from rag_engine.errors import EvalInputError

COST_QUANTUM = Decimal("1e-12")
"""Cost means are rounded (half-even) to picodollars so the text is finite and stable."""


def _check(gold: Sequence[str], k: int) -> None:
    if not gold:
        raise EvalInputError(
            "retrieval metrics need at least one gold anchor (expected-insufficient queries are not scored on ranking)"
        )
    if k < 1:
        raise EvalInputError(f"k must be >= 1, got {k}")


def _first_hits(ranked: Sequence[str], gold: Iterable[str], k: int) -> list[int]:
    """1-based positions (within top k) at which a not-yet-seen gold anchor appears."""
    wanted = set(gold)
    seen: set[str] = set()
    hits = []
    for pos, anchor in enumerate(ranked[:k], start=1):
        if anchor in wanted and anchor not in seen:
            seen.add(anchor)
            hits.append(pos)
    return hits


def recall_at_k(ranked: Sequence[str], gold: Sequence[str], k: int) -> float:
    """Share of the distinct gold anchors found in the top k."""
    _check(gold, k)
    return len(_first_hits(ranked, gold, k)) / len(set(gold))


def reciprocal_rank(ranked: Sequence[str], gold: Sequence[str], k: int = TOP_K) -> float:
    """1 / rank of the first gold anchor in the top k; 0 if none is there."""
    _check(gold, k)
    hits = _first_hits(ranked, gold, k)
    return 1.0 / hits[0] if hits else 0.0


def ndcg_at_k(ranked: Sequence[str], gold: Sequence[str], k: int = TOP_K) -> float:
    """nDCG@k with binary gains: DCG = sum 1/log2(pos+1) over gold hits; ideal = min(|gold|, k) hits at the top."""
    _check(gold, k)
    dcg = sum(1.0 / math.log2(pos + 1) for pos in _first_hits(ranked, gold, k))
    ideal = sum(1.0 / math.log2(pos + 1) for pos in range(1, min(len(set(gold)), k) + 1))
    return dcg / ideal


def average_precision_at_k(ranked: Sequence[str], gold: Sequence[str], k: int = TOP_K) -> float:
    """AP@k, binary relevance: mean of precision@rank over the gold hits, normalised by min(|gold|, k)."""
    _check(gold, k)
    hits = _first_hits(ranked, gold, k)
    return sum(n / pos for n, pos in enumerate(hits, start=1)) / min(len(set(gold)), k)


RANKING_METRICS: tuple[str, ...] = ("recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10", "map@10")
"""Per-query ranking metrics: defined for answerable queries only (None otherwise)."""


def ranking_values(ranked: Sequence[str], gold: Sequence[str], expect_insufficient: bool) -> dict[str, float | None]:
    """Every ranking metric of one ranked list (cut to the top 10), or all None without gold."""
    if expect_insufficient:
        return dict.fromkeys(RANKING_METRICS)
    top = tuple(ranked[:TOP_K])
    return {
        "recall@1": recall_at_k(top, gold, 1),
        "recall@5": recall_at_k(top, gold, 5),
        "recall@10": recall_at_k(top, gold, 10),
        "mrr@10": reciprocal_rank(top, gold, 10),
        "ndcg@10": ndcg_at_k(top, gold, 10),
        "map@10": average_precision_at_k(top, gold, 10),
    }


def citation_hit(cited: Sequence[str], gold: Sequence[str], expect_insufficient: bool) -> float | None:
    """1 if any cited anchor is gold, 0 otherwise (also when nothing is cited); None without gold."""
    if expect_insufficient or not gold:
        return None
    return 1.0 if set(cited) & set(gold) else 0.0


def insufficient_correct(answered_insufficient: bool, expect_insufficient: bool) -> float:
    """1 if the system said "insufficient evidence" exactly when it should have."""
    return 1.0 if answered_insufficient == expect_insufficient else 0.0


def score_query(
    *,
    id: str,
    pack: str,
    question: str,
    gold: Sequence[str],
    expect_insufficient: bool,
    ranked: Sequence[str],
    cited: Sequence[str],
    answered_insufficient: bool,
    latency_ms: float,
    cost_usd: Decimal | str | None,
) -> QueryResult:
    """One scored QueryResult from what the system did; ``ranked`` is cut to the top 10.

    An answerable query must have gold anchors: a golden entry that expects an answer but names
    no gold cannot be scored and is reported, not silently counted as a miss.
    """
    if not expect_insufficient and not gold:
        raise EvalInputError(f"query {id!r} expects an answer but has no gold anchors")
    top = tuple(ranked[:TOP_K])
    values = ranking_values(top, gold, expect_insufficient)
    return QueryResult.model_validate(
        {
            "id": id,
            "pack": pack,
            "question": question,
            "gold": tuple(gold),
            "expect_insufficient": expect_insufficient,
            "ranked": top,
            "cited": tuple(cited),
            "answered_insufficient": answered_insufficient,
            "latency_ms": float(latency_ms),
            "cost_usd": None if cost_usd is None else format(Decimal(cost_usd), "f"),  # never 1E-7
            **values,
            "citation_hit": citation_hit(cited, gold, expect_insufficient),
            "insufficient_correct": insufficient_correct(answered_insufficient, expect_insufficient),
        }
    )


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def mean_cost(costs: Iterable[str | None]) -> str | None:
    """Exact mean of per-query costs as decimal text, or None when any cost is unknown."""
    costs = list(costs)
    known = [c for c in costs if c is not None]
    if not costs or len(known) != len(costs):
        return None
    try:
        total = sum((Decimal(c) for c in known), Decimal(0))
    except InvalidOperation:
        raise EvalInputError(f"not a decimal cost among {costs[:5]}") from None
    mean = (total / len(costs)).quantize(COST_QUANTUM)
    return format(mean.normalize(), "f") if mean else "0"


def system_metrics(rows: Sequence[tuple[Sequence[str], Sequence[str], bool]]) -> dict[str, Any]:
    """One system's ranking metrics over ``(ranked, gold, expect_insufficient)`` rows: the means
    over answerable queries (the systems table of a report); ``queries`` counts the scored ones."""
    per_query = [ranking_values(ranked, gold, insufficient) for ranked, gold, insufficient in rows]
    out: dict[str, Any] = {name: _mean([v[name] for v in per_query]) for name in RANKING_METRICS}
    out["queries"] = sum(1 for _, _, insufficient in rows if not insufficient)
    return out


def aggregate(queries: Sequence[QueryResult]) -> dict[str, Any]:
    """The report's ``metrics`` object (JSON key names) from scored queries."""
    if not queries:
        raise EvalInputError("cannot aggregate an eval over zero queries")
    out: dict[str, Any] = {name: _mean([q.value(name) for q in queries]) for name in METRIC_NAMES}
    latencies = np.array([q.latency_ms for q in queries], dtype=float)
    out["latency_ms_p50"] = float(np.percentile(latencies, 50))
    out["latency_ms_p95"] = float(np.percentile(latencies, 95))
    out["cost_per_query_usd"] = mean_cost(q.cost_usd for q in queries)
    estimated = [q.tokens_estimated for q in queries]
    out["estimated_cost_queries"] = None if None in estimated else sum(1 for e in estimated if e)
    out["queries"] = len(queries)
    found = [q.refused_found for q in queries]
    out["refused_found"] = None if None in found else sum(1 for f in found if f)
    return out
