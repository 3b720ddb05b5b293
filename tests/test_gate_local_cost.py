"""The committed eval baseline has a known cost per query (a replayed answer priced as machine time
per recorded token; an extractive answer makes no call and costs 0), and the gate CI runs judges
``cost_per_query``: a candidate 20 % dearer than a priced baseline fails, one within the tolerance
passes. Through the real gate CLI and the committed config."""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from evals.report import EvalReport, dump_report, load_report
from rag_engine.config import load_config

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "evals" / "reports" / "BASELINE.json"


def test_the_committed_baseline_has_a_known_cost_per_query():
    base = load_report(BASELINE)
    assert all(q.cost_usd is not None for q in base.queries), "a query of the baseline has an unknown cost"
    assert base.metrics.cost_per_query_usd is not None
    # a query's cost is its answer call's: the replayed answer's recorded tokens at demo_replay's rate
    # (the question embedding is metered outside the query's run); no call (the extractive answer,
    # "insufficient evidence"), no cost
    answered = [Decimal(q.cost_usd or 0) for q in base.queries if q.answer_method == "model"]
    unanswered = [Decimal(q.cost_usd or 0) for q in base.queries if q.answer_method != "model"]
    assert all(c > 0 for c in answered) and set(unanswered) <= {Decimal(0)}
    mean = sum([*answered, *unanswered], Decimal(0)) / len(base.queries)
    assert Decimal(base.metrics.cost_per_query_usd) == pytest.approx(mean)


def _priced(tmp_path: Path) -> Path:
    """The committed baseline as if every question had been answered by a priced model call: the
    committed one answers offline (extractive, no call), and a gate cannot judge a cost of 0."""
    data = load_report(BASELINE).to_json()
    for q in data["queries"]:
        q["cost_usd"] = "0.0001"
    data["metrics"]["cost_per_query_usd"] = "0.0001"
    return dump_report(EvalReport.model_validate(data), tmp_path / "baseline-priced.json")


def _candidate(tmp_path: Path, baseline: Path, factor: str) -> Path:
    """The baseline itself with every query's cost (and their mean) times ``factor``: only the cost differs."""
    data = load_report(baseline).to_json()
    for q in data["queries"]:
        q["cost_usd"] = format(Decimal(q["cost_usd"]) * Decimal(factor), "f")
    mean = Decimal(data["metrics"]["cost_per_query_usd"]) * Decimal(factor)
    data["metrics"]["cost_per_query_usd"] = format(mean, "f")
    return dump_report(EvalReport.model_validate(data), tmp_path / f"candidate-{factor}.json")


def _gate(tmp_path: Path, candidate: Path, baseline: Path) -> tuple[int, dict, str]:
    out = tmp_path / f"gate-{candidate.stem}.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "evals.gates",
            "--config",
            "config/engine.yaml",
            "--report",
            str(candidate),
            "--baseline-report",
            str(baseline),
            "--output",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc.returncode, json.loads(out.read_text(encoding="utf-8")), proc.stdout


@pytest.mark.parametrize(("factor", "code", "status"), [("1.20", 1, "regression"), ("1.05", 0, "pass")])
def test_the_gate_judges_cost_per_query_against_the_committed_baseline(tmp_path, factor, code, status):
    tolerance = load_config(ROOT / "config" / "engine.yaml").evals.cost_tolerance
    assert tolerance == pytest.approx(0.10)
    baseline = _priced(tmp_path)
    rc, result, stdout = _gate(tmp_path, _candidate(tmp_path, baseline, factor), baseline)
    assert (rc, result["status"]) == (code, status), stdout
    cost = result["resources"]["cost_per_query"]
    assert cost["judged"] is True and cost["regressed"] is (status == "regression")
    assert cost["candidate"] == pytest.approx(cost["baseline"] * float(factor))
    regressions = [r for r in result["reasons"] if r.startswith("regression:")]
    if status == "regression":  # the cost is the only reason: quality and tokens are the baseline's
        assert len(regressions) == 1 and regressions[0].startswith("regression: cost_per_query baseline ")
        assert "(+20.0%, more than the tolerance 10%)" in regressions[0]
    else:
        assert regressions == []
    assert all(m["mean_delta"] == 0 for m in result["metrics"].values())
