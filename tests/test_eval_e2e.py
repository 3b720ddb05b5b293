"""Eval reports from the real query path, gated by the real CLI and by the Dagster check."""

from __future__ import annotations

import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import dagster as dg
import pytest
import yaml

from evals.bm25_baseline import read_chunks
from evals.report import SYSTEMS, dump_report, load_report, report_sha256
from evals.runner import default_role, load_golden, run_eval
from rag_assets.definitions import build_definitions
from rag_engine.config import load_config
from rag_engine.engine import Engine
from rag_engine.governance.policy import gate

ROOT = Path(__file__).resolve().parents[1]
NO_FLOOR = re.compile(r"^  bm25_margin: .*$", re.M)
"""Tests of the regression gate against a baseline turn the BM25 floor off: whether the engine
clears it depends on the embedder; the floor has its own test here and in test_gates."""


def _worse(engine: Engine) -> Engine:
    """A deliberately worse retrieval config: one lexical and one dense hit, no graph, no expansion."""
    cfg = engine.cfg
    retrieval = cfg.retrieval.model_copy(
        update={"lexical_k": 1, "dense_k": 1, "final_k": 1, "reference_expansion_k": 0}
    )
    traversal = cfg.traversal.model_copy(update={"max_candidates": 0})
    return Engine(cfg.model_copy(update={"retrieval": retrieval, "traversal": traversal}), engine.root, engine.env)


def _gate(
    report: Path, baseline: Path | None, out: Path, accept: Path | None = None, config: str = "config/engine.yaml"
) -> subprocess.CompletedProcess:
    if config == "config/engine.yaml" and baseline is not None:
        no_floor = out.parent / "engine-no-floor.yaml"
        no_floor.write_text(NO_FLOOR.sub("  bm25_margin: null", (ROOT / config).read_text()))
        config = str(no_floor)
    cmd = [sys.executable, "-m", "evals.gates", "--config", config, "--report", str(report), "--output", str(out)]
    if baseline is not None:
        cmd += ["--baseline-report", str(baseline)]
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


def test_report_carries_identity_and_metrics(reports, ingested_engine):
    import json

    _, good, _ = reports
    golden_queries = sum(len(load_golden(ROOT / p)["queries"]) for p in ingested_engine.cfg.evals.golden)
    data = json.loads(good.read_text())
    identity = "local_embed/multilingual-e5-small-q4:384;input_type=query|passage"
    assert data["embedder"]["identity"] == identity
    assert data["reindex"] == {"embedder_identity": identity, "complete": True}
    assert data["metrics"]["queries"] == golden_queries and data["metrics"]["recall@10"] > 0.5
    assert data["metrics"]["cost_per_query_usd"] == "0"  # extractive answers: no model call, exactly free
    assert len(data["golden"]["hash"]) == 64


def test_worse_config_fails_the_gate_and_a_matching_acceptance_passes_it(reports, tmp_path):
    _base, good, bad = reports
    same = _gate(good, good, tmp_path / "same.json")
    assert same.returncode == 0, same.stdout + same.stderr
    failed = _gate(bad, good, tmp_path / "gate.json")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    gate = yaml.safe_load((tmp_path / "gate.json").read_text())
    assert gate["status"] == "regression" and any(m["regressed"] for m in gate["metrics"].values())

    acceptance = tmp_path / "accept.yaml"
    acceptance.write_text(
        yaml.safe_dump(
            {
                "baseline_sha256": report_sha256(good),
                "candidate_sha256": report_sha256(bad),
                "reason": "test: trading recall for latency",
                "accepted_by": "qa",
            }
        )
    )
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
    text = NO_FLOOR.sub("  bm25_margin: null", (ROOT / "config/engine.yaml").read_text())
    text = text.replace(
        "  seed: 7\n",
        f"  seed: 7\n  baseline: {good}\n  reports_dir: {tmp_path / 'reports'}\n"
        f"  acceptances_dir: {tmp_path / 'acceptances'}\n",
    )
    passing = tmp_path / "engine-pass.yaml"
    passing.write_text(text)
    worse = tmp_path / "engine-worse.yaml"
    worse.write_text(
        text.replace("  lexical_k: 20\n  dense_k: 20\n", "  lexical_k: 1\n  dense_k: 1\n")
        .replace("  final_k: 10\n", "  final_k: 1\n")
        .replace("  max_candidates: 5\n", "  max_candidates: 0\n")
        .replace("  reference_expansion_k: 5\n", "  reference_expansion_k: 0\n")
    )
    instance = dg.DagsterInstance.ephemeral()
    for path, ok in ((passing, True), (worse, False)):
        defs = build_definitions(str(path))
        job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection={dg.AssetKey("eval_report")})
        result = job.execute_in_process(instance=instance, raise_on_error=False)
        evaluation = {e.check_name: e for e in result.get_asset_check_evaluations()}["eval_gate"]
        assert evaluation.passed is ok, evaluation.metadata
        assert result.success is ok  # a failed blocking ERROR check fails the run


def test_report_scores_bm25_and_each_leg_on_the_same_chunks(reports, ingested_engine):
    _, good, _ = reports
    report = load_report(good)
    files = [load_golden(ROOT / p) for p in ingested_engine.cfg.evals.golden]
    # one table per golden file: the pack, or "pack/set" for a second set such as the paraphrases
    golden = {g["pack"] + (f"/{g['set']}" if g.get("set") else ""): g for g in files}
    assert report.retrieval.weights == ingested_engine.leg_weights and report.retrieval.k is None
    assert set(report.systems) == set(golden)
    for pack, table in report.systems.items():
        mine = [q for q in report.queries if q.pack == pack and not q.expect_insufficient]
        assert table.engine.ndcg_at_10 == pytest.approx(sum(q.ndcg_at_10 for q in mine) / len(mine))
        # both find most gold of a golden set; paraphrases share few words with their passage by design
        floor = 0.5 if "/" not in pack else 0.2
        assert table.bm25.recall_at_10 > floor and table.fulltext.recall_at_10 > floor
        assert all(table.system(s).map_at_10 is not None for s in SYSTEMS)
        # BM25 ranks only the pack's active, eligible chunks the query's role may read
        name = golden[pack]["pack"]
        role = golden[pack].get("role") or default_role(ingested_engine, name)
        collections = gate(ingested_engine.cfg, role).collections
        corpus = {c.anchor for c in read_chunks(ingested_engine.driver, ingested_engine.database, name, collections)}
        assert corpus
        for q in golden[pack]["queries"]:
            ranked = report.rankings[q["id"]]
            assert set(ranked.bm25) <= corpus and len(ranked.bm25) == len(set(ranked.bm25)) <= 10
            assert len(ranked.fulltext) <= 10 and len(ranked.dense) <= 10


def test_floor_gate_on_the_candidate_alone_matches_the_systems_table(reports, tmp_path):
    _, good, _ = reports
    report = load_report(good)
    margin = load_config(ROOT / "config/engine.yaml").evals.bm25_margin
    if margin is None:
        pytest.skip("the shipped config turns the BM25 floor off")
    below = [
        (pack, m)
        for pack, t in sorted(report.systems.items())
        for m in ("ndcg@10", "map@10")
        if t.engine.get(m) < t.bm25.get(m) - margin
    ]
    proc = _gate(good, None, tmp_path / "floor.json")
    assert proc.returncode == (1 if below else 0), proc.stdout + proc.stderr
    result = yaml.safe_load((tmp_path / "floor.json").read_text())
    assert [(p, m) for p, per in result["floor"].items() for m, c in per.items() if c["failed"]] == below


def test_ablation_changes_the_engine_only(reports, ingested_engine):
    _, good, _ = reports
    full = load_report(good)
    path = next(ROOT / p for p in ingested_engine.cfg.evals.golden if "company_x_kb" in p)
    ablation = {"exact": 0.0, "lexical": 1.0, "dense": 0.0}
    lexical = run_eval(ingested_engine, [path], progress=lambda m: None, weights=ablation)
    # the report names every leg's weight: the ones not overridden (live) at their configured value
    assert lexical.retrieval.weights == {**ingested_engine.leg_weights, **ablation}
    assert set(lexical.retrieval.weights) == {"exact", "lexical", "dense", "live", "graph"}
    assert set(lexical.systems) == {"company_x_kb"}
    for system in ("bm25", "fulltext", "dense"):  # the baselines do not depend on the engine's weights
        assert lexical.systems["company_x_kb"].system(system) == full.systems["company_x_kb"].system(system)
    assert {q: r for q, r in full.rankings.items() if q in lexical.rankings} == lexical.rankings


# -- generation through the replay cassette -------------------------------------------------


def test_the_runner_answers_with_the_model_unless_told_extractive():
    from evals.runner import build_parser

    assert build_parser().parse_args(["--output", "r.json"]).extractive is False
    assert build_parser().parse_args(["--output", "r.json", "--generate"]).extractive is False
    assert build_parser().parse_args(["--output", "r.json", "--extractive"]).extractive is True


def _with_cassette(engine: Engine, cassette: Path) -> Engine:
    """The engine with the demo replay provider reading ``cassette`` (a fresh client cache)."""
    cfg = engine.cfg
    providers = tuple(
        p.model_copy(update={"cassette": str(cassette)}) if p.kind == "replay" else p for p in cfg.providers
    )
    return Engine(cfg.model_copy(update={"providers": providers}), engine.root, engine.env)


@pytest.fixture(scope="module")
def answer_cassette(ingested_engine, tmp_path_factory):
    """Fixture answers recorded by the cassette builder for a few GDPR golden questions, on this store."""
    from evals.cassettes.build_demo_cassette import build_answers

    base = tmp_path_factory.mktemp("answers")
    golden = load_golden(ROOT / "packs/legal_regulatory/golden/queries.yaml")
    picked = [q for q in golden["queries"] if not q.get("insufficient_evidence")][:4]
    picked += [q for q in golden["queries"] if q.get("insufficient_evidence")][:1]
    small = base / "golden.yaml"
    small.write_text(yaml.safe_dump({**golden, "queries": picked}))
    cassette = base / "answers.jsonl"
    recorder = _with_cassette(ingested_engine, cassette)
    try:
        stats = build_answers(recorder, golden=[small], progress=lambda m: None)
    finally:
        recorder.close()
    return small, cassette, stats


def test_cassette_replay_answers_golden_questions_with_citations(answer_cassette, ingested_engine):
    small, cassette, stats = answer_cassette
    assert stats["answers"] >= 1 and stats["source"] == "fixture:grounded-demo-answerer"
    engine = _with_cassette(ingested_engine, cassette)
    try:
        generated = run_eval(engine, [small], generate=True, progress=lambda m: None)
        again = run_eval(engine, [small], generate=True, progress=lambda m: None)  # the same ledger
    finally:
        engine.close()
    # a query's tokens are its own run's: a second run on one ledger counts the same, not double
    assert [q.tokens for q in again.queries] == [q.tokens for q in generated.queries]
    extractive = run_eval(ingested_engine, [small], progress=lambda m: None)
    gen = generated.generation
    assert (gen.provider, gen.model) == ("demo_replay", "fixture-demo-replay")  # a fixture's name
    assert gen.failures == {} and gen.model_answers == stats["answers"]
    assert gen.reported_models == ("fixture-grounded-demo-answerer",)
    by_model = [q for q in generated.queries if q.answer_method == "model"]
    assert by_model and all(q.answer_error is None and q.tokens and q.tokens > 0 for q in by_model)
    for q in by_model:  # a generated answer cites what the context held: anchors of the ranking
        assert q.cited and set(q.cited) <= set(q.ranked) | {a for r in generated.rankings.values() for a in r.bm25}
    assert any(q.citation_hit == 1.0 for q in by_model)
    # demo-chat is priced as machine time per recorded token (demo_replay's local_cost), the query
    # embedding likewise (local_embed's): a known cost, the same in every run of the same requests
    assert generated.metrics.cost_per_query_usd is not None and Decimal(generated.metrics.cost_per_query_usd) > 0
    assert [q.cost_usd for q in again.queries] == [q.cost_usd for q in generated.queries]
    # generation never changes the ranking
    assert [q.ranked for q in generated.queries] == [q.ranked for q in extractive.queries]
    # the fixture's counts are characters / 4: its answers' tokens and cost say they are estimates
    assert all(q.tokens_estimated for q in by_model)
    assert generated.metrics.estimated_cost_queries == len(by_model)
    assert not any(q.tokens_estimated for q in extractive.queries)  # no answer call: nothing estimated


def test_eval_traffic_carries_its_run_id_and_the_eval_actor(answer_cassette, ingested_engine):
    """Every model call of an eval (the answers, every question's embedding, the baselines' too) is
    metered under the eval's run id and the actor ``eval``, and every query is audited so: eval
    traffic is told apart from users', and a run's ledger sum is the whole eval."""
    from rag_engine.governance.audit import audit_trail
    from rag_engine.usage import EVAL_ACTOR

    small, cassette, _ = answer_cassette
    engine = _with_cassette(ingested_engine, cassette)
    before = {r.id for r in ingested_engine.ledger.records()}
    try:
        report = run_eval(engine, [small], generate=True, progress=lambda m: None, run_id="eval-run-test")
    finally:
        engine.close()
    assert report.run_id == "eval-run-test"
    new = [r for r in ingested_engine.ledger.records() if r.id not in before]
    assert new and {(r.run_id, r.actor) for r in new} == {("eval-run-test", EVAL_ACTOR)}
    assert {"query", "answer"} <= {r.purpose for r in new}
    embeds = [r for r in new if r.purpose == "query"]
    assert len(embeds) >= 2 * len(report.queries)  # the engine's and the dense baseline's, at least
    # a query's tokens are its own calls': their sum is no more than the run's
    assert sum(q.tokens or 0 for q in report.queries) <= sum(r.input_tokens + r.output_tokens for r in new)
    audited = [a for a in audit_trail(ingested_engine).records(event="query") if a.payload["run_id"] == "eval-run-test"]
    assert len(audited) == len(report.queries) and {a.actor for a in audited} == {EVAL_ACTOR}
    # each audit record lists its own query's calls, by ledger id, from the same run
    calls = [set(a.payload.get("model_calls") or []) for a in audited]
    assert all(calls) and set().union(*calls) <= {r.id for r in new}


def test_a_replay_miss_is_the_extractive_answer_not_a_failure(answer_cassette, ingested_engine, tmp_path):
    """No recording for a question is not a failed model: the engine answers it extractively (the
    offline default), the report counts it apart, and the gate does not fail on it."""
    from evals.gate_models import GENERATION_FAILED
    from evals.gates import evaluate_gate

    small, cassette, _ = answer_cassette
    lines = cassette.read_text(encoding="utf-8").splitlines()
    holed = tmp_path / "holed.jsonl"
    holed.write_text("\n".join(lines[1:]) + "\n", encoding="utf-8")  # drop one recorded answer
    messages: list[str] = []
    full_engine, holed_engine = _with_cassette(ingested_engine, cassette), _with_cassette(ingested_engine, holed)
    try:
        full = run_eval(full_engine, [small], generate=True, progress=lambda m: None)
        missed = run_eval(holed_engine, [small], generate=True, progress=messages.append)
    finally:
        full_engine.close()
        holed_engine.close()
    assert missed.generation.failures == {} and missed.generation.extractive == 1
    extractive = [q for q in missed.queries if q.answer_method == "extractive"]
    assert len(extractive) == 1 and extractive[0].answer_error is None and extractive[0].answer
    assert not any("GENERATION FAILED" in m for m in messages), messages
    cfg = ingested_engine.cfg.evals.model_copy(update={"min_queries": 1, "bm25_margin": None})
    result = evaluate_gate(missed, full, cfg, candidate_sha="c" * 64, baseline_sha="b" * 64, acceptance=None)
    assert not any(r.startswith(GENERATION_FAILED) for r in result.reasons), result.reasons


def test_dagster_eval_run_tags_are_the_ledger_sum_of_its_calls(answer_cassette, ingested_engine, tmp_path):
    """eval_report's queries are metered under its Dagster run id (every question's embedding, deep
    in retrieval, included): the run's cost tags equal the ledger's sum for that run, not 0 calls."""
    from rag_assets.run_costs import CALLS_TAG, COST_TAG, ESTIMATED_TAG, EXACT_COST_TAG, TOKENS_TAG, run_cost_tags
    from rag_engine.usage import EVAL_ACTOR

    small, _, _ = answer_cassette
    text = (ROOT / "config/engine.yaml").read_text()
    golden = re.compile(r"^  golden: \[.*?\]\n", re.M | re.S)
    assert golden.search(text)
    text = golden.sub(f"  golden: [{small}]\n", text).replace(
        "  seed: 7\n", f"  seed: 7\n  reports_dir: {tmp_path / 'reports'}\n  acceptances_dir: {tmp_path / 'acc'}\n"
    )
    path = tmp_path / "engine-eval.yaml"
    path.write_text(text)
    defs = build_definitions(str(path))
    instance = dg.DagsterInstance.ephemeral()
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection={dg.AssetKey("eval_report")})
    result = job.execute_in_process(instance=instance, raise_on_error=False)  # the gate may fail: other golden set
    run_id = result.run_id
    records = defs.resources["rag"].engine().ledger.records(run_id=run_id)
    assert len(records) >= len(load_golden(small)["queries"])  # at least each question's embedding
    assert {r.actor for r in records} == {EVAL_ACTOR}
    tags = instance.get_run_by_id(run_id).tags
    expected = run_cost_tags(records)
    assert {k: tags.get(k) for k in (COST_TAG, EXACT_COST_TAG, TOKENS_TAG, CALLS_TAG, ESTIMATED_TAG)} == expected
    assert int(tags[CALLS_TAG]) == len(records) > 0
