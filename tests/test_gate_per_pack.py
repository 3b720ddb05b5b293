"""The gate per pack: the pooled comparison again on each pack's queries (judged) and on each
pack's split (shown), so a regression of one pack fails the gate even when the pooled mean holds,
and the CLI summary and the Dagster check's table say which pack moved."""

from __future__ import annotations

from evals.gate_render import summary
from evals.gates import evaluate_gate
from evals.report import EvalReport
from rag_assets.assets.evals import gate_table
from rag_engine.config import EvalsConfig
from tests.test_gates import make_report

CFG = EvalsConfig(max_drop=0.02, bootstrap_samples=2000, confidence=0.95, seed=7, min_queries=20, pack_min_queries=10)
BIG, SMALL = "rulebook", "handbook"


def pack_of(size_big: int):
    return lambda i: BIG if i < size_big else SMALL


def with_splits(report: EvalReport) -> EvalReport:
    """Every third query of each pack on the test split, the rest on train."""
    queries = tuple(
        q.model_copy(update={"split": "test" if int(q.id[1:]) % 3 == 0 else "train"}) for q in report.queries
    )
    return report.model_copy(update={"queries": queries})


def trade_off(size_big: int, n: int):
    """(candidate, baseline): the candidate lifts the big pack's gold from rank 2 to 1 and drops
    the small pack's from rank 1 to 4, so the pooled means improve while the small pack regresses."""
    baseline = make_report(n=n, rank_of=lambda i: 2 if i < size_big else 1, pack_of=pack_of(size_big))
    candidate = make_report(n=n, rank_of=lambda i: 1 if i < size_big else 4, pack_of=pack_of(size_big))
    return with_splits(candidate), with_splits(baseline)


def judge(candidate: EvalReport, baseline: EvalReport, cfg: EvalsConfig = CFG):
    return evaluate_gate(candidate, baseline, cfg, candidate_sha="c" * 64, baseline_sha="b" * 64, acceptance=None)


def test_one_pack_regressing_fails_the_gate_although_the_pooled_means_improve():
    candidate, baseline = trade_off(size_big=60, n=76)  # 16 small-pack queries, all answerable
    result = judge(candidate, baseline)
    assert all(m.mean_delta > 0 for name, m in result.metrics.items() if name in ("ndcg@10", "map@10"))
    assert not result.regressed_metrics  # the pooled rows alone would pass
    assert result.status == "regression" and result.exit_code == 1
    small = result.groups[SMALL]
    assert small.judged and small.n == 16 and "ndcg@10" in small.regressed_metrics
    assert small.metrics["ndcg@10"].n == 16 and small.metrics["ndcg@10"].mean_delta < -0.5
    assert not result.groups[BIG].regressed_metrics
    assert any(r.startswith(f"pack_regression: pack {SMALL}: ndcg@10") for r in result.reasons)
    assert not any(BIG in r for r in result.reasons)


def test_split_rows_are_shown_and_never_judged():
    candidate, baseline = trade_off(size_big=60, n=76)
    result = judge(candidate, baseline)
    split = result.groups[f"{SMALL}@test"]
    assert not split.judged and split.metrics["ndcg@10"].mean_delta < -0.5
    assert not split.regressed_metrics and not split.metrics["ndcg@10"].regressed
    assert not any(f"{SMALL}@" in r or f"{BIG}@" in r for r in result.reasons)
    assert set(result.groups) == {BIG, f"{BIG}@test", f"{BIG}@train", SMALL, f"{SMALL}@test", f"{SMALL}@train"}


def test_a_pack_with_fewer_paired_queries_than_the_policy_is_shown_not_judged():
    candidate, baseline = trade_off(size_big=70, n=76)  # 6 small-pack queries < pack_min_queries 10
    result = judge(candidate, baseline)
    small = result.groups[SMALL]
    assert small.metrics["ndcg@10"].n == 6 and small.metrics["ndcg@10"].mean_delta < -0.5
    assert not small.regressed_metrics and result.status == "pass"
    assert judge(candidate, baseline, CFG.model_copy(update={"pack_min_queries": 5})).status == "regression"


def test_identical_reports_give_zero_deltas_in_every_group_and_pass():
    report = with_splits(make_report(n=76, pack_of=pack_of(60)))
    result = judge(report, report)
    assert result.status == "pass" and result.groups
    assert all(m.mean_delta == 0.0 for g in result.groups.values() for m in g.metrics.values())


def test_the_summary_and_the_dagster_table_name_the_regressed_pack():
    candidate, baseline = trade_off(size_big=60, n=76)
    result = judge(candidate, baseline)
    text = summary(result)
    line = next(x for x in text.splitlines() if x.strip().startswith(f"pack {SMALL} "))
    assert "ndcg@10 -0." in line and "!" in line
    assert next(x for x in text.splitlines() if x.strip().startswith(f"split {SMALL}@test")).count("!") == 0
    rows = {r.data["figure"]: r.data for r in gate_table(result).records}
    row = rows[f"{SMALL}: ndcg@10"]
    assert row["kind"] == "pack" and row["regressed"] is True and row["n"] == 16
    assert rows[f"{BIG}: ndcg@10"]["regressed"] is False
    assert rows[f"{SMALL}@test: ndcg@10"]["kind"] == "split" and rows[f"{SMALL}@test: ndcg@10"]["regressed"] is None
    # the reason is shown by its row, not repeated as a reason row
    assert not any(f.startswith("pack_regression") for f in rows)
