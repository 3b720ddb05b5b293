"""The eval regression gate: synthetic reports written to files, judged by the real CLI
(`python -m evals.gates`, exit codes 0/1/2) and by the pure `evaluate_gate` the Dagster check reuses."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from evals.gates import bootstrap_interval, evaluate_gate, paired_values
from evals.metrics import aggregate, score_query
from evals.report import EvalReport, dump_report, load_report, report_sha256
from rag_engine.config import EvalsConfig, load_config

N_QUERIES = 30
INSUFFICIENT = {3, 11, 19, 27}  # expected "insufficient evidence": no gold
GOLDEN_A = hashlib.sha256(b"golden A").hexdigest()
GOLDEN_B = hashlib.sha256(b"golden B").hexdigest()
EMBED_A = "local_hash/feature-hash-v1/384"
EMBED_B = "openai/text-embedding-3-small/1536"

CFG = EvalsConfig(max_drop=0.02, bootstrap_samples=2000, confidence=0.95, seed=7, min_queries=20)


def always_first(i: int) -> int | None:
    return 1


def make_report(
    *,
    n: int = N_QUERIES,
    rank_of: Callable[[int], int | None] = always_first,
    golden_hash: str = GOLDEN_A,
    embedder_identity: str = EMBED_A,
    reindex: dict | None = None,
    id_prefix: str = "q",
    created_at: str = "2025-01-01T00:00:00+00:00",
) -> EvalReport:
    """Answerable query i has one gold anchor, retrieved at rank_of(i) (None: not retrieved);
    a retrieved gold is also cited. Expected-insufficient queries are answered as such."""
    queries = []
    for i in range(n):
        insufficient = i in INSUFFICIENT
        gold = [] if insufficient else [f"doc{i}#gold"]
        rank = None if insufficient else rank_of(i)
        ranked = [f"doc{i}#other{j}" for j in range(10)]
        if rank is not None:
            ranked[rank - 1] = gold[0]
        queries.append(score_query(
            id=f"{id_prefix}{i:03d}", pack="legal_regulatory", question=f"question {i}?", gold=gold,
            expect_insufficient=insufficient, ranked=ranked, cited=gold if rank is not None else [],
            answered_insufficient=insufficient, latency_ms=100.0 + i, cost_usd="0.0001"))
    return EvalReport.model_validate({
        "schema": "rag-eval-report/1",
        "created_at": created_at,
        "config_hash": "0123456789abcdef",
        "golden": {"paths": ["packs/legal_regulatory/golden/queries.yaml"], "hash": golden_hash},
        "generation": {"provider": "demo_replay", "model": "demo-chat"},
        "embedder": {"provider": "local_hash", "model": "hash-embed-384", "dimension": 384,
                     "identity": embedder_identity},
        "reindex": reindex,
        "metrics": aggregate(queries),
        "queries": queries,
    })


def worse(i: int) -> int | None:
    """The deliberately worse candidate: gold pushed from rank 1 to rank 4 on 2 of 3 queries."""
    return 4 if i % 3 else 1


@pytest.fixture(scope="module")
def real_evals(repo_root: Path) -> EvalsConfig:
    return load_config(repo_root / "config" / "engine.yaml").evals


def run_gate(repo_root: Path, tmp_path: Path, candidate: EvalReport, baseline: EvalReport,
             accept: dict | str | None = None, accept_suffix: str = ".yaml") -> tuple[int, dict, str]:
    cand = dump_report(candidate, tmp_path / "candidate.json")
    base = dump_report(baseline, tmp_path / "baseline.json")
    out = tmp_path / "out" / "gate.json"
    args = [sys.executable, "-m", "evals.gates", "--config", "config/engine.yaml",
            "--report", str(cand), "--baseline-report", str(base), "--output", str(out)]
    if accept is not None:
        acc = tmp_path / f"accept{accept_suffix}"
        if isinstance(accept, str):
            acc.write_text(accept)
        elif accept_suffix == ".json":
            acc.write_text(json.dumps(accept))
        else:
            acc.write_text(yaml.safe_dump(accept))
        args += ["--accept", str(acc)]
    proc = subprocess.run(args, cwd=repo_root, capture_output=True, text=True, timeout=120)
    assert out.is_file(), proc.stderr
    return proc.returncode, json.loads(out.read_text()), proc.stdout


def gate(candidate: EvalReport, baseline: EvalReport, cfg: EvalsConfig = CFG, acceptance: dict | None = None,
         candidate_sha: str = "c" * 64, baseline_sha: str = "b" * 64):
    return evaluate_gate(candidate, baseline, cfg, candidate_sha=candidate_sha, baseline_sha=baseline_sha,
                         acceptance=acceptance)


# -- via the real CLI ----------------------------------------------------------------------


def test_identical_reports_pass(repo_root, tmp_path):
    code, out, stdout = run_gate(repo_root, tmp_path, make_report(), make_report())
    assert code == 0 and out["status"] == "pass" and out["exit_code"] == 0
    assert out["reasons"] == []
    nd = out["metrics"]["ndcg@10"]
    assert nd["mean_delta"] == 0.0 and nd["ci_low"] == 0.0 and nd["ci_high"] == 0.0
    assert nd["n"] == N_QUERIES - len(INSUFFICIENT)
    assert out["metrics"]["insufficient_evidence_accuracy"]["n"] == N_QUERIES
    assert "PASS" in stdout


def test_worse_candidate_regresses_and_names_the_metric(repo_root, tmp_path):
    code, out, stdout = run_gate(repo_root, tmp_path, make_report(rank_of=worse), make_report())
    assert code == 1 and out["status"] == "regression"
    nd = out["metrics"]["ndcg@10"]
    assert nd["regressed"] is True
    assert nd["baseline_mean"] == 1.0 and nd["candidate_mean"] < 0.7
    assert nd["mean_delta"] < -0.02 and nd["ci_high"] < 0
    assert out["metrics"]["mrr@10"]["regressed"] is True
    assert out["metrics"]["recall@5"]["regressed"] is False  # rank 4 is still in the top 5
    assert any(r.startswith("regression: ndcg@10") for r in out["reasons"])
    assert "REGRESSED" in stdout and "ndcg@10" in stdout
    assert out["candidate_sha256"] == report_sha256(tmp_path / "candidate.json")
    assert out["baseline_sha256"] == report_sha256(tmp_path / "baseline.json")


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_matching_acceptance_accepts_the_regression(repo_root, tmp_path, suffix):
    candidate, baseline = make_report(rank_of=worse), make_report()
    cand_sha = hashlib.sha256(dump_report(candidate, tmp_path / "c.json").read_bytes()).hexdigest()
    base_sha = hashlib.sha256(dump_report(baseline, tmp_path / "b.json").read_bytes()).hexdigest()
    accept = {"baseline_sha256": base_sha, "candidate_sha256": cand_sha,
              "reason": "smaller chunks trade ranking for context size", "accepted_by": "jane.doe",
              "date": "2025-06-01"}
    code, out, _ = run_gate(repo_root, tmp_path, candidate, baseline, accept, accept_suffix=suffix)
    assert code == 0 and out["status"] == "accepted"
    assert out["metrics"]["ndcg@10"]["regressed"] is True  # accepted, not hidden
    assert out["acceptance"]["matched"] is True and out["acceptance"]["applied"] is True
    assert out["acceptance"]["accepted_by"] == "jane.doe" and out["acceptance"]["date"] == "2025-06-01"
    assert any("smaller chunks" in r for r in out["reasons"])


def test_acceptance_with_wrong_hash_is_reported_and_ignored(repo_root, tmp_path):
    candidate, baseline = make_report(rank_of=worse), make_report()
    base_sha = hashlib.sha256(dump_report(baseline, tmp_path / "b.json").read_bytes()).hexdigest()
    accept = {"baseline_sha256": base_sha, "candidate_sha256": "f" * 64, "reason": "r", "accepted_by": "me"}
    code, out, _ = run_gate(repo_root, tmp_path, candidate, baseline, accept)
    assert code == 1 and out["status"] == "regression"
    assert out["acceptance"]["matched"] is False and out["acceptance"]["applied"] is False
    assert any("candidate_sha256" in p for p in out["acceptance"]["problems"])
    assert any(r.startswith("acceptance_ignored") for r in out["reasons"])


def test_invalid_acceptance_files_are_reported_and_ignored(repo_root, tmp_path):
    candidate, baseline = make_report(rank_of=worse), make_report()
    c = hashlib.sha256(dump_report(candidate, tmp_path / "c.json").read_bytes()).hexdigest()
    b = hashlib.sha256(dump_report(baseline, tmp_path / "b.json").read_bytes()).hexdigest()
    blank_reason = {"baseline_sha256": b, "candidate_sha256": c, "reason": "  ", "accepted_by": "me"}
    code, out, _ = run_gate(repo_root, tmp_path, candidate, baseline, blank_reason)
    assert code == 1 and out["acceptance"]["matched"] is False
    assert any(p.startswith("reason") for p in out["acceptance"]["problems"])
    code, out, _ = run_gate(repo_root, tmp_path, candidate, baseline, "reason: [unclosed\n")
    assert code == 1 and "not valid JSON/YAML" in out["acceptance"]["problems"][0]


def test_mismatched_golden_hash_is_incomparable(repo_root, tmp_path):
    code, out, stdout = run_gate(repo_root, tmp_path, make_report(golden_hash=GOLDEN_B), make_report())
    assert code == 2 and out["status"] == "incomparable"
    assert any(r.startswith("golden_hash_mismatch") for r in out["reasons"])
    assert out["metrics"] == {}
    assert "INCOMPARABLE" in stdout


def test_mismatched_query_ids_are_incomparable(repo_root, tmp_path):
    code, out, _ = run_gate(repo_root, tmp_path, make_report(id_prefix="x"), make_report())
    assert code == 2
    assert any(r.startswith("query_ids_mismatch") for r in out["reasons"])


def test_too_few_queries_is_incomparable(repo_root, tmp_path, real_evals):
    n = real_evals.min_queries - 1
    code, out, _ = run_gate(repo_root, tmp_path, make_report(n=n), make_report(n=n))
    assert code == 2
    assert any(r.startswith("too_few_queries") for r in out["reasons"])


def test_unreadable_input_is_incomparable_and_still_writes_output(repo_root, tmp_path):
    good = dump_report(make_report(), tmp_path / "good.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "rag-eval-report/1", "queries": ')
    out = tmp_path / "gate.json"
    proc = subprocess.run([sys.executable, "-m", "evals.gates", "--config", "config/engine.yaml",
                           "--report", str(bad), "--baseline-report", str(good), "--output", str(out)],
                          cwd=repo_root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    result = json.loads(out.read_text())
    assert result["status"] == "incomparable"
    assert any("candidate report" in r and "not valid JSON" in r for r in result["reasons"])


def test_embedder_change_fails_unless_reindexed(repo_root, tmp_path):
    code, out, _ = run_gate(repo_root, tmp_path, make_report(embedder_identity=EMBED_B), make_report())
    assert code == 1 and out["status"] == "regression"
    assert any(r.startswith("embedder_changed_without_reindex") for r in out["reasons"])
    assert not any(m["regressed"] for m in out["metrics"].values())  # quality alone would pass

    done = {"embedder_identity": EMBED_B, "complete": True}
    code, out, _ = run_gate(repo_root, tmp_path, make_report(embedder_identity=EMBED_B, reindex=done), make_report())
    assert code == 0 and out["status"] == "pass"


@pytest.mark.parametrize("reindex", [
    {"embedder_identity": EMBED_B, "complete": False},  # started, not finished
    {"embedder_identity": EMBED_A, "complete": True},   # complete, but with the old embedder
])
def test_partial_or_foreign_reindex_does_not_cover_embedder_change(reindex):
    result = gate(make_report(embedder_identity=EMBED_B, reindex=reindex), make_report())
    assert result.exit_code == 1
    assert any(r.startswith("embedder_changed_without_reindex") for r in result.reasons)


def test_acceptance_cannot_waive_embedder_change():
    accept = {"baseline_sha256": "b" * 64, "candidate_sha256": "c" * 64, "reason": "r", "accepted_by": "me"}
    result = gate(make_report(embedder_identity=EMBED_B), make_report(), acceptance=accept)
    assert result.status == "regression" and result.acceptance.matched and not result.acceptance.applied


# -- the decision rule (pure) --------------------------------------------------------------


def test_small_noise_within_max_drop_passes():
    # one of 26 answerable queries slips from rank 1 to 2: ndcg mean delta = -0.369/26 = -0.014
    result = gate(make_report(rank_of=lambda i: 2 if i == 5 else 1), make_report())
    nd = result.metrics["ndcg@10"]
    assert -CFG.max_drop < nd.mean_delta < 0
    assert result.status == "pass" and result.exit_code == 0


def test_drop_beyond_tolerance_but_not_confident_passes():
    # two queries lose their gold entirely: mean delta -2/26 = -0.077 < -0.02, but most resamples
    # contain neither, so the interval reaches 0: could be noise, not a regression
    result = gate(make_report(rank_of=lambda i: None if i in (5, 6) else 1), make_report())
    rec = result.metrics["recall@5"]
    assert rec.mean_delta < -CFG.max_drop
    assert rec.ci_high == 0.0 and rec.regressed is False


def test_confident_drop_regresses_only_beyond_max_drop():
    # every answerable query slips from rank 1 to 2: each ndcg delta is 1/log2(3) - 1 = -0.369,
    # so the interval is a point below 0; only the tolerance decides
    base, slipped = make_report(), make_report(rank_of=lambda i: 2)

    def policy(max_drop: float) -> EvalsConfig:
        return EvalsConfig(gate_metrics=("ndcg@10", "mrr@10"), max_drop=max_drop, min_queries=20)

    result = gate(slipped, base, policy(0.5))
    assert result.metrics["ndcg@10"].ci_high < 0 and result.status == "pass"
    # mrr drops by exactly 0.5 on every query: a drop equal to max_drop is tolerated
    assert result.metrics["mrr@10"].mean_delta == -0.5 and not result.metrics["mrr@10"].regressed
    result = gate(slipped, base, policy(0.3))
    assert result.status == "regression" and result.regressed_metrics == ("ndcg@10", "mrr@10")


def test_improvement_passes():
    result = gate(make_report(), make_report(rank_of=worse))
    assert result.status == "pass" and result.metrics["ndcg@10"].mean_delta > 0


def test_bootstrap_is_deterministic_per_seed():
    deltas = np.random.default_rng(0).normal(-0.05, 0.2, size=40)
    a = bootstrap_interval(deltas, samples=2000, confidence=0.95, seed=7)
    b = bootstrap_interval(deltas, samples=2000, confidence=0.95, seed=7)
    c = bootstrap_interval(deltas, samples=2000, confidence=0.95, seed=8)
    assert a == b and a != c
    assert a[0] < deltas.mean() < a[1]
    wide = bootstrap_interval(deltas, samples=2000, confidence=0.99, seed=7)
    assert wide[0] < a[0] and wide[1] > a[1]
    mixed = make_report(rank_of=lambda i: 1 + i % 4)
    assert gate(mixed, make_report()).to_json() == gate(mixed, make_report()).to_json()


def test_pairing_ignores_report_order_and_nulls():
    base = make_report()
    shuffled = base.model_copy(update={"queries": tuple(reversed(base.queries))})
    c, b = paired_values(shuffled, base, "ndcg@10")
    assert c.size == N_QUERIES - len(INSUFFICIENT)  # expected-insufficient queries have no value
    assert gate(shuffled, base).to_json()["metrics"] == gate(base, base).to_json()["metrics"]


def test_unknown_gate_metric_is_incomparable():
    cfg = EvalsConfig(gate_metrics=("ndcg@10", "bleu"), min_queries=20)
    result = gate(make_report(), make_report(), cfg)
    assert result.exit_code == 2 and any("bleu" in r for r in result.reasons)


def test_changed_gold_under_same_ids_is_incomparable():
    base = make_report()
    q0 = base.queries[0]
    changed = q0.model_copy(update={"gold": ("doc0#elsewhere",)})
    candidate = base.model_copy(update={"queries": (changed,) + base.queries[1:]})
    result = gate(candidate, base)
    assert result.status == "incomparable" and any("golden_content_mismatch" in r for r in result.reasons)


def test_result_round_trips_through_json(tmp_path):
    result = gate(make_report(rank_of=worse), make_report())
    data = result.to_json()
    assert data["schema"] == "rag-eval-gate/1"
    assert set(data) >= {"status", "exit_code", "reasons", "metrics", "baseline_sha256",
                         "candidate_sha256", "acceptance"}
    assert set(data["metrics"]["ndcg@10"]) == {"baseline_mean", "candidate_mean", "mean_delta", "ci_low",
                                               "ci_high", "n", "regressed"}
    assert result.regressed_metrics == ("ndcg@10", "mrr@10")
    path = dump_report(make_report(), tmp_path / "r.json")
    assert load_report(path) == make_report()
