"""The committed eval baseline has a known cost (the replayed answers priced as machine time per
recorded token), so the gate CI runs judges ``cost_per_query``: a candidate 20 % dearer than
the baseline fails, one within the tolerance passes. Through the real gate CLI against the
committed baseline and config."""

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
    assert base.metrics.cost_per_query_usd is not None and Decimal(base.metrics.cost_per_query_usd) > 0
    # a query's cost is its answer call's: the replayed answer's recorded tokens at demo_replay's rate
    # (the question embedding is metered outside the query's run); no call, no cost
    answered = [Decimal(q.cost_usd or 0) for q in base.queries if q.answer_method == "model"]
    unanswered = [Decimal(q.cost_usd or 0) for q in base.queries if q.answer_method != "model"]
    assert answered and min(answered) > 0 and set(unanswered) == {Decimal(0)}


def _candidate(tmp_path: Path, factor: str) -> Path:
    """The baseline itself with every query's cost (and their mean) times ``factor``: only the cost differs."""
    data = load_report(BASELINE).to_json()
    for q in data["queries"]:
        q["cost_usd"] = format(Decimal(q["cost_usd"]) * Decimal(factor), "f")
    mean = Decimal(data["metrics"]["cost_per_query_usd"]) * Decimal(factor)
    data["metrics"]["cost_per_query_usd"] = format(mean, "f")
    return dump_report(EvalReport.model_validate(data), tmp_path / f"candidate-{factor}.json")


def _gate(tmp_path: Path, candidate: Path) -> tuple[int, dict, str]:
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
            str(BASELINE),
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
    rc, result, stdout = _gate(tmp_path, _candidate(tmp_path, factor))
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
