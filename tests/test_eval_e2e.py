"""Eval reports from the real query path, gated by the real CLI and by the Dagster check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from evals.report import dump_report, report_sha256
from evals.runner import run_eval
from rag_assets.definitions import build_definitions
from rag_engine.engine import Engine

ROOT = Path(__file__).resolve().parents[1]


def _worse(engine: Engine) -> Engine:
    """A deliberately worse retrieval config: one lexical and one dense hit, no graph, no expansion."""
    cfg = engine.cfg
    retrieval = cfg.retrieval.model_copy(update={"lexical_k": 1, "dense_k": 1, "final_k": 1,
                                                 "reference_expansion_k": 0})
    traversal = cfg.traversal.model_copy(update={"max_candidates": 0})
    return Engine(cfg.model_copy(update={"retrieval": retrieval, "traversal": traversal}), engine.root, engine.env)


def _gate(report: Path, baseline: Path, out: Path, accept: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "evals.gates", "--config", "config/engine.yaml", "--report", str(report),
           "--baseline-report", str(baseline), "--output", str(out)]
    if accept:
        cmd += ["--accept", str(accept)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def reports(ingested_engine, tmp_path_factory):
    base = tmp_path_factory.mktemp("eval")
    golden = [ROOT / p for p in ingested_engine.cfg.evals.golden]
    good = dump_report(run_eval(ingested_engine, golden, progress=lambda m: None), base / "good.json")
    worse_engine = _worse(ingested_engine)
    try:
        bad = dump_report(run_eval(worse_engine, golden, progress=lambda m: None), base / "worse.json")
    finally:
        worse_engine.close()
    return base, good, bad


def test_report_carries_identity_and_metrics(reports):
    import json

    _, good, _ = reports
    data = json.loads(good.read_text())
    identity = "local_embed/multilingual-e5-small-q4:384;input_type=query|passage"
    assert data["embedder"]["identity"] == identity
    assert data["reindex"] == {"embedder_identity": identity, "complete": True}
    assert data["metrics"]["queries"] == 50 and data["metrics"]["recall@10"] > 0.5
    assert data["metrics"]["cost_per_query_usd"] == "0"  # extractive answers: no model call, exactly free
    assert len(data["golden"]["hash"]) == 64


def test_worse_config_fails_the_gate_and_a_matching_acceptance_passes_it(reports, tmp_path):
    base, good, bad = reports
    same = _gate(good, good, tmp_path / "same.json")
    assert same.returncode == 0, same.stdout + same.stderr
    failed = _gate(bad, good, tmp_path / "gate.json")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    gate = yaml.safe_load((tmp_path / "gate.json").read_text())
    assert gate["status"] == "regression" and any(m["regressed"] for m in gate["metrics"].values())

    acceptance = tmp_path / "accept.yaml"
    acceptance.write_text(yaml.safe_dump({"baseline_sha256": report_sha256(good), "candidate_sha256": report_sha256(bad),
                                          "reason": "test: trading recall for latency", "accepted_by": "qa"}))
    accepted = _gate(bad, good, tmp_path / "accepted.json", acceptance)
    assert accepted.returncode == 0, accepted.stdout
    assert yaml.safe_load((tmp_path / "accepted.json").read_text())["status"] == "accepted"

    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(acceptance.read_text().replace(report_sha256(bad), "0" * 64))
    assert _gate(bad, good, tmp_path / "wrong.json", wrong).returncode == 1


def test_mismatched_golden_pack_is_incomparable(reports, tmp_path):
    import json

    _, good, bad = reports
    data = json.loads(bad.read_text())
    data["golden"]["hash"] = "f" * 64
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    assert _gate(other, good, tmp_path / "g.json").returncode == 2


def test_dagster_eval_gate_blocks_on_regression(reports, ingested_engine, tmp_path):
    _, good, _ = reports
    text = (ROOT / "config/engine.yaml").read_text()
    text = text.replace("  seed: 7\n", f"  seed: 7\n  baseline: {good}\n  reports_dir: {tmp_path / 'reports'}\n"
                                         f"  acceptances_dir: {tmp_path / 'acceptances'}\n")
    passing = tmp_path / "engine-pass.yaml"
    passing.write_text(text)
    worse = tmp_path / "engine-worse.yaml"
    worse.write_text(text.replace("  lexical_k: 20\n  dense_k: 20\n", "  lexical_k: 1\n  dense_k: 1\n")
                     .replace("  final_k: 10\n", "  final_k: 1\n").replace("  max_candidates: 5\n", "  max_candidates: 0\n")
                     .replace("  reference_expansion_k: 5\n", "  reference_expansion_k: 0\n"))
    instance = dg.DagsterInstance.ephemeral()
    for path, ok in ((passing, True), (worse, False)):
        defs = build_definitions(str(path))
        job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection={dg.AssetKey("eval_report")})
        result = job.execute_in_process(instance=instance, raise_on_error=False)
        evaluation = {e.check_name: e for e in result.get_asset_check_evaluations()}["eval_gate"]
        assert evaluation.passed is ok, evaluation.metadata
        assert result.success is ok  # a failed blocking ERROR check fails the run
