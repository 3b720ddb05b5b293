"""Our ranking metrics against trec_eval's own C code (pytrec_eval), on random rankings and on
every ranking of the committed baseline report: nDCG@10, MAP@10, Recall@5/@10 and MRR@10 agree
to 1e-9 wherever the conventions are the same, and differ exactly as evals/metrics.py documents
where they are not (AP divided by min(|gold|, 10), not |gold|)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import pytrec_eval

from evals.metrics import ranking_values
from evals.report import load_report

ROOT = Path(__file__).resolve().parents[1]
TREC = {"ndcg_cut_10": "ndcg@10", "map_cut_10": "map@10", "recall_5": "recall@5", "recall_10": "recall@10"}


def trec_values(rankings: dict[str, list[str]], gold: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    """trec_eval's measures per query. A run gives scores, not ranks: strictly decreasing scores
    keep our order (trec_eval breaks score ties by document id)."""
    qrels = {q: dict.fromkeys(docs, 1) for q, docs in gold.items()}
    run = {q: {doc: float(len(ranked) - i) for i, doc in enumerate(ranked)} for q, ranked in rankings.items()}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {*TREC, "recip_rank"})
    return evaluator.evaluate(run)


def ours(ranked: list[str], gold: list[str]) -> dict[str, float]:
    values = ranking_values(ranked, gold, expect_insufficient=False)
    return {k: v for k, v in values.items() if v is not None}


def random_case(rng: random.Random, max_gold: int) -> tuple[list[str], list[str]]:
    pool = [f"d{i}" for i in range(40)]
    gold = rng.sample(pool, rng.randint(1, max_gold))
    ranked = rng.sample(pool, 10)  # distinct anchors: trec_eval keeps one score per document
    return ranked, gold


def test_every_metric_equals_trec_eval_on_random_rankings_with_at_most_ten_gold():
    rng = random.Random(20261206)
    cases = {f"q{i}": random_case(rng, max_gold=10) for i in range(500)}
    trec = trec_values({q: r for q, (r, _) in cases.items()}, {q: g for q, (_, g) in cases.items()})
    compared = 0
    for q, (ranked, gold) in cases.items():
        mine = ours(ranked, gold)
        for trec_name, name in TREC.items():
            assert mine[name] == pytest.approx(trec[q][trec_name], abs=1e-9), (q, name)
            compared += 1
        assert mine["mrr@10"] == pytest.approx(trec[q]["recip_rank"], abs=1e-9)  # a top 10 only: same as @10
    assert compared == 2000


def test_with_more_than_ten_gold_ap_differs_by_exactly_the_documented_denominator():
    rng = random.Random(7)
    cases = {f"q{i}": random_case(rng, max_gold=30) for i in range(200)}
    cases = {q: c for q, c in cases.items() if len(c[1]) > 10}
    assert len(cases) > 50
    trec = trec_values({q: r for q, (r, _) in cases.items()}, {q: g for q, (_, g) in cases.items()})
    for q, (ranked, gold) in cases.items():
        mine = ours(ranked, gold)
        assert mine["map@10"] == pytest.approx(trec[q]["map_cut_10"] * len(gold) / 10, abs=1e-9)
        assert mine["ndcg@10"] == pytest.approx(trec[q]["ndcg_cut_10"], abs=1e-9)


def test_the_committed_baseline_scores_what_trec_eval_scores_on_its_own_rankings():
    report = load_report(ROOT / "evals" / "reports" / "BASELINE.json")
    answerable = [q for q in report.queries if q.gold and len(set(q.ranked)) == len(q.ranked)]
    assert len(answerable) > 300
    assert all(len(set(q.gold)) <= 10 for q in answerable)  # the convention difference never applies here
    trec = trec_values({q.id: list(q.ranked) for q in answerable}, {q.id: list(q.gold) for q in answerable})
    for q in answerable:
        for trec_name, name in TREC.items():
            # a query whose ranking holds no document gets no trec_eval entry: all zero
            expected = trec.get(q.id, {}).get(trec_name, 0.0)
            assert q.value(name) == pytest.approx(expected, abs=1e-9), (q.id, name)
