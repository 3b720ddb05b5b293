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

from evals.gate_metrics import bootstrap_interval, paired_values
from evals.gates import evaluate_gate
from evals.metrics import aggregate, score_query, system_metrics
from evals.report import SCHEMA, SCHEMA_V1, EvalReport, dump_report, load_report, report_sha256
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


def _ranked(i: int, rank: int | None) -> list[str]:
    ranked = [f"doc{i}#other{j}" for j in range(10)]
    if rank is not None:
        ranked[rank - 1] = f"doc{i}#gold"
    return ranked


def one_pack(i: int) -> str:
    return "legal_regulatory"


def make_report(
    *,
    n: int = N_QUERIES,
    rank_of: Callable[[int], int | None] = always_first,
    bm25_rank_of: Callable[[int], int | None] | None = None,
    pack_of: Callable[[int], str] = one_pack,
    golden_hash: str = GOLDEN_A,
    embedder_identity: str = EMBED_A,
    reindex: dict | None = None,
    id_prefix: str = "q",
    created_at: str = "2025-01-01T00:00:00+00:00",
    schema: str = SCHEMA,
) -> EvalReport:
    """Answerable query i has one gold anchor, retrieved at rank_of(i) (None: not retrieved);
    a retrieved gold is also cited. Expected-insufficient queries are answered as such.

    BM25 (and the fulltext leg alone) retrieve the gold at bm25_rank_of(i) (default: where the
    engine does, so the BM25 floor passes); the dense leg alone never finds it. A schema-1
    report has no map@10 and no systems table, as the old runner wrote it."""
    bm25_rank_of = bm25_rank_of or rank_of
    queries, rows, rankings = [], {}, {}
    for i in range(n):
        insufficient = i in INSUFFICIENT
        gold = [] if insufficient else [f"doc{i}#gold"]
        rank = None if insufficient else rank_of(i)
        ranked = _ranked(i, rank)
        qid, pack = f"{id_prefix}{i:03d}", pack_of(i)
        queries.append(
            score_query(
                id=qid,
                pack=pack,
                question=f"question {i}?",
                gold=gold,
                expect_insufficient=insufficient,
                ranked=ranked,
                cited=gold if rank is not None else [],
                answered_insufficient=insufficient,
                latency_ms=100.0 + i,
                cost_usd="0.0001",
            )
        )
        bm25 = _ranked(i, None if insufficient else bm25_rank_of(i))
        rankings[qid] = {"bm25": bm25, "fulltext": bm25, "dense": []}
        per = rows.setdefault(pack, {"engine": [], "bm25": [], "fulltext": [], "dense": []})
        for system, r in (("engine", ranked), ("bm25", bm25), ("fulltext", bm25), ("dense", [])):
            per[system].append((r, gold, insufficient))
    v2 = {}
    if schema == SCHEMA:
        v2 = {
            "retrieval": {"weights": {"exact": 1.0, "lexical": 1.0, "dense": 1.0}, "k": None},
            "systems": {pack: {s: system_metrics(r) for s, r in per.items()} for pack, per in rows.items()},
            "rankings": rankings,
        }
    else:
        queries = [q.model_copy(update={"map_at_10": None}) for q in queries]
    metrics = aggregate(queries)
    if schema != SCHEMA:
        del metrics["map@10"]
    return EvalReport.model_validate(
        {
            **v2,
            "schema": schema,
            "created_at": created_at,
            "config_hash": "0123456789abcdef",
            "golden": {"paths": ["packs/legal_regulatory/golden/queries.yaml"], "hash": golden_hash},
            "generation": {"provider": "demo_replay", "model": "demo-chat"},
            "embedder": {
                "provider": "local_hash",
                "model": "hash-embed-384",
                "dimension": 384,
                "identity": embedder_identity,
            },
            "reindex": reindex,
            "metrics": metrics,
            "queries": queries,
        }
    )


def worse(i: int) -> int | None:
    """The deliberately worse candidate: gold pushed from rank 1 to rank 4 on 2 of 3 queries."""
    return 4 if i % 3 else 1


@pytest.fixture(scope="module")
def real_evals(repo_root: Path) -> EvalsConfig:
    return load_config(repo_root / "config" / "engine.yaml").evals


def run_gate(
    repo_root: Path,
    tmp_path: Path,
    candidate: EvalReport,
    baseline: EvalReport | None,
    accept: dict | str | None = None,
    accept_suffix: str = ".yaml",
) -> tuple[int, dict, str]:
    cand = dump_report(candidate, tmp_path / "candidate.json")
    out = tmp_path / "out" / "gate.json"
    args = [
        sys.executable,
        "-m",
        "evals.gates",
        "--config",
        "config/engine.yaml",
        "--report",
        str(cand),
        "--output",
        str(out),
    ]
    if baseline is not None:
        args += ["--baseline-report", str(dump_report(baseline, tmp_path / "baseline.json"))]
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


def gate(
    candidate: EvalReport,
    baseline: EvalReport | None,
    cfg: EvalsConfig = CFG,
    acceptance: dict | None = None,
    candidate_sha: str = "c" * 64,
    baseline_sha: str = "b" * 64,
):
    return evaluate_gate(
        candidate, baseline, cfg, candidate_sha=candidate_sha, baseline_sha=baseline_sha, acceptance=acceptance
    )


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
    accept = {
        "baseline_sha256": base_sha,
        "candidate_sha256": cand_sha,
        "reason": "smaller chunks trade ranking for context size",
        "accepted_by": "jane.doe",
        "date": "2025-06-01",
    }
    code, out, _ = run_gate(repo_root, tmp_path, candidate, baseline, accept, accept_suffix=suffix)
    assert code == 0 and out["status"] == "accepted"
    assert out["metrics"]["ndcg@10"]["regressed"] is True  # accepted, not hidden
    assert out["acceptance"]["matched"] is True and out["acceptance"]["applied"] is True
    # no principal configured: the typed name is recorded as such (the one approval rule)
    assert out["acceptance"]["accepted_by"] == "local:jane.doe" and out["acceptance"]["date"] == "2025-06-01"
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
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "evals.gates",
            "--config",
            "config/engine.yaml",
            "--report",
            str(bad),
            "--baseline-report",
            str(good),
            "--output",
            str(out),
        ],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=120,
    )
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


@pytest.mark.parametrize(
    "reindex",
    [
        {"embedder_identity": EMBED_B, "complete": False},  # started, not finished
        {"embedder_identity": EMBED_A, "complete": True},  # complete, but with the old embedder
    ],
)
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
    c, _b = paired_values(shuffled, base, "ndcg@10")
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
    candidate = base.model_copy(update={"queries": (changed, *base.queries[1:])})
    result = gate(candidate, base)
    assert result.status == "incomparable" and any("golden_content_mismatch" in r for r in result.reasons)


def test_result_round_trips_through_json(tmp_path):
    result = gate(make_report(rank_of=worse), make_report())
    data = result.to_json()
    assert data["schema"] == "rag-eval-gate/2"
    assert set(data) >= {
        "status",
        "exit_code",
        "reasons",
        "metrics",
        "floor",
        "baseline_sha256",
        "candidate_sha256",
        "acceptance",
    }
    assert set(data["floor"]["legal_regulatory"]["map@10"]) == {"engine", "bm25", "delta", "margin", "failed"}
    assert data["policy"]["bm25_margin"] == CFG.bm25_margin
    assert set(data["metrics"]["ndcg@10"]) == {
        "baseline_mean",
        "candidate_mean",
        "mean_delta",
        "ci_low",
        "ci_high",
        "n",
        "regressed",
    }
    assert result.regressed_metrics == ("ndcg@10", "map@10", "mrr@10")
    path = dump_report(make_report(), tmp_path / "r.json")
    assert load_report(path) == make_report()


# -- the BM25 floor (the candidate alone) ---------------------------------------------------


def two_packs(i: int) -> str:
    return "legal_regulatory" if i % 2 else "company_x_kb"


def test_engine_below_bm25_fails_the_floor_without_a_baseline(repo_root, tmp_path):
    # BM25 finds every gold at rank 1; the engine at rank 4 on 2 of 3 queries, on one pack only
    candidate = make_report(rank_of=lambda i: worse(i) if i % 2 else 1, bm25_rank_of=always_first, pack_of=two_packs)
    code, out, stdout = run_gate(repo_root, tmp_path, candidate, None)
    assert code == 1 and out["status"] == "regression" and out["baseline_sha256"] is None
    assert out["metrics"] == {}
    legal, kb = out["floor"]["legal_regulatory"], out["floor"]["company_x_kb"]
    assert legal["ndcg@10"]["failed"] and legal["map@10"]["failed"] and legal["map@10"]["bm25"] == 1.0
    assert not kb["ndcg@10"]["failed"] and kb["ndcg@10"]["delta"] == 0.0
    reasons = [r for r in out["reasons"] if r.startswith("bm25_floor")]
    assert len(reasons) == 2 and all("pack legal_regulatory" in r for r in reasons)
    map_reason = next(r for r in reasons if "map@10" in r)
    assert f"engine {legal['map@10']['engine']:.4f} < bm25 1.0000" in map_reason
    assert "BELOW BM25" in stdout


def test_engine_level_with_bm25_passes_the_floor_without_a_baseline(repo_root, tmp_path):
    code, out, _ = run_gate(repo_root, tmp_path, make_report(rank_of=worse), None)
    assert code == 0 and out["status"] == "pass"
    assert out["floor"]["legal_regulatory"]["ndcg@10"]["delta"] == 0.0  # same rankings: margin 0 holds


def test_floor_margin_is_per_metric():
    # one of 26 answerable queries slips to rank 2 below BM25: nDCG trails by 0.369/26 = 0.0142,
    # MAP (AP 1 -> 0.5) by 0.5/26 = 0.0192
    candidate = make_report(rank_of=lambda i: 2 if i == 5 else 1, bm25_rank_of=always_first)

    def margin(m: float | None) -> EvalsConfig:
        return EvalsConfig(min_queries=20, bm25_margin=m)

    within = gate(candidate, None, margin(0.02))
    assert within.status == "pass" and within.floor_failures == ()
    assert within.floor["legal_regulatory"]["map@10"].delta == pytest.approx(-0.5 / 26)
    split = gate(candidate, None, margin(0.015))
    assert split.status == "regression" and split.floor_failures == (("legal_regulatory", "map@10"),)
    assert gate(candidate, None, margin(0.0)).floor_failures == (
        ("legal_regulatory", "ndcg@10"),
        ("legal_regulatory", "map@10"),
    )
    off = gate(candidate, None, margin(None))
    assert off.status == "incomparable" and off.floor == {}
    assert any(r.startswith("nothing_to_judge") for r in off.reasons)
    # the engine far above BM25 is fine whatever the margin
    assert gate(make_report(bm25_rank_of=worse), None, margin(0.0)).status == "pass"


def test_floor_applies_beside_the_baseline_comparison_and_cannot_be_accepted():
    candidate = make_report(bm25_rank_of=lambda i: None)  # BM25 finds nothing: floor holds
    assert gate(candidate, make_report()).status == "pass"
    below = make_report(rank_of=worse, bm25_rank_of=always_first)
    base = make_report(rank_of=worse)
    result = gate(
        below,
        base,
        acceptance={"baseline_sha256": "b" * 64, "candidate_sha256": "c" * 64, "reason": "r", "accepted_by": "me"},
    )
    assert not any(m.regressed for m in result.metrics.values())  # no regression against the baseline
    assert result.status == "regression" and result.exit_code == 1
    assert result.acceptance.matched and not result.acceptance.applied
    assert any("cannot waive the bm25_floor" in p for p in result.acceptance.problems)


def test_schema_1_candidate_is_incomparable_for_the_floor_only_when_it_is_on(repo_root, tmp_path):
    old = make_report(schema=SCHEMA_V1)
    assert old.systems is None and old.metrics.map_at_10 is None
    code, out, _ = run_gate(repo_root, tmp_path, old, None)
    assert code == 2 and out["status"] == "incomparable"
    assert any(r.startswith("bm25_floor_unavailable") for r in out["reasons"])
    off = EvalsConfig(gate_metrics=("ndcg@10", "mrr@10"), min_queries=20, bm25_margin=None)
    assert gate(old, make_report(schema=SCHEMA_V1), off).status == "pass"
    assert gate(old, make_report(schema=SCHEMA_V1), CFG).status == "incomparable"


def test_schema_1_baseline_lacks_map_and_says_so():
    result = gate(make_report(), make_report(schema=SCHEMA_V1))
    assert result.status == "incomparable"
    (reason,) = result.reasons
    assert (
        reason.startswith("too_few_queries: map@10 has 0 paired values") and "baseline report has no map@10" in reason
    )
    assert result.floor["legal_regulatory"]["ndcg@10"].failed is False  # the floor is still shown
