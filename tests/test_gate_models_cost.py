"""The gate covers generation-model changes, cost, tokens and latency (as a ratio to an in-run
control), and its output is auditable on its own."""

from __future__ import annotations

from evals.gate_models import GENERATION_CHANGED, GENERATION_FAILED, GENERATION_IDENTITY_CHANGED
from evals.gates import evaluate_gate
from evals.report import EvalReport
from rag_engine.config import EvalsConfig
from tests.test_gates import make_report, run_gate


def uncited(i: int) -> int | None:
    """The gold is not retrieved (so not cited) on every other query: worse answers."""
    return None if i % 2 else 1


CFG = EvalsConfig(
    gate_metrics=("ndcg@10", "recall@5", "cost_per_query", "tokens_per_query", "latency_ratio"),
    max_drop=0.02,
    bootstrap_samples=500,
    min_queries=20,
    bm25_margin=None,
    cost_tolerance=0.10,
    tokens_tolerance=0.10,
    latency_ratio_tolerance=0.5,
)
ANSWERS_GATED = CFG.model_copy(
    update={"gate_metrics": (*CFG.gate_metrics, "citation_hit_rate", "insufficient_evidence_accuracy")}
)
DEMO = {"provider": "demo_replay", "model": "fixture-demo-replay"}  # the shipped default: a fixture's name
HOSTED = {"provider": "openai", "model": "gpt-4o-mini"}


def with_queries(
    report: EvalReport,
    *,
    cost: str = "0.0001",
    tokens: int = 100,
    latency: float = 100.0,
    control: float = 10.0,
    configured: dict | None = None,
    generation: dict | None = None,
) -> EvalReport:
    data = report.to_json()
    for q in data["queries"]:
        q.update(cost_usd=cost, tokens=tokens, latency_ms=latency, control_latency_ms=control)
    data["metrics"]["cost_per_query_usd"] = cost
    data["configured_generation"] = configured
    if generation is not None:
        data["generation"] = generation
    return EvalReport.model_validate(data)


def judge(
    candidate: EvalReport,
    baseline: EvalReport,
    configured: dict | None = None,
    acceptance=None,
    cfg: EvalsConfig = CFG,
):
    return evaluate_gate(
        candidate,
        baseline,
        cfg,
        candidate_sha="c" * 64,
        baseline_sha="b" * 64,
        acceptance=acceptance,
        configured_generation=configured,
    )


def test_same_cost_tokens_latency_pass():
    r = judge(with_queries(make_report()), with_queries(make_report()))
    assert r.status == "pass", r.reasons
    assert {k: v.judged for k, v in r.resources.items()} == {
        "cost_per_query": True,
        "tokens_per_query": True,
        "latency_ratio": True,
    }


def test_cost_regression_beyond_tolerance_fails_and_an_acceptance_can_waive_it():
    r = judge(with_queries(make_report(), cost="0.0050"), with_queries(make_report(), cost="0.0001"))
    assert r.status == "regression"
    assert any(x.startswith("regression: cost_per_query") for x in r.reasons), r.reasons
    within = judge(with_queries(make_report(), cost="0.000105"), with_queries(make_report(), cost="0.0001"))
    assert within.status == "pass"
    accepted = judge(
        with_queries(make_report(), cost="0.0050"),
        with_queries(make_report(), cost="0.0001"),
        acceptance={
            "baseline_sha256": "b" * 64,
            "candidate_sha256": "c" * 64,
            "reason": "the hosted model is worth it",
            "accepted_by": "jane",
        },
    )
    assert accepted.status == "accepted"


def test_unknown_cost_against_known_cost_fails():
    data = with_queries(make_report()).to_json()
    for q in data["queries"]:
        q["cost_usd"] = None
    data["metrics"]["cost_per_query_usd"] = None
    r = judge(EvalReport.model_validate(data), with_queries(make_report()))
    assert r.status == "regression" and r.resources["cost_per_query"].candidate is None


def test_tokens_per_query_regression():
    r = judge(with_queries(make_report(), tokens=150), with_queries(make_report(), tokens=100))
    assert r.status == "regression" and r.resources["tokens_per_query"].regressed


def test_latency_is_judged_as_a_ratio_to_the_in_run_control():
    base = with_queries(make_report(), latency=100.0, control=10.0)
    slower_machine = with_queries(make_report(), latency=300.0, control=30.0)  # everything 3x slower
    assert judge(slower_machine, base).status == "pass"
    slower_engine = with_queries(make_report(), latency=2000.0, control=10.0)  # 20x, control unchanged
    r = judge(slower_engine, base)
    assert r.status == "regression" and r.resources["latency_ratio"].regressed


def test_older_reports_without_tokens_or_control_are_not_judged_on_them():
    r = judge(make_report(), make_report())
    assert r.status == "pass", r.reasons
    assert not r.resources["tokens_per_query"].judged and "older runner" in r.resources["tokens_per_query"].note


def test_model_change_without_eval_is_blocked():
    # the config now names the hosted model; the candidate report was run with the demo model configured
    cand = with_queries(make_report(), configured=DEMO, generation={"provider": "none", "model": "extractive"})
    base = with_queries(make_report(), configured=DEMO, generation={"provider": "none", "model": "extractive"})
    r = judge(cand, base, configured=HOSTED)
    assert r.status == "regression"
    assert any(x.startswith(GENERATION_CHANGED) for x in r.reasons), r.reasons
    # the configured model changed from the baseline's but the candidate answered extractively
    cand2 = with_queries(make_report(), configured=HOSTED, generation={"provider": "none", "model": "extractive"})
    r2 = judge(cand2, base, configured=HOSTED)
    assert any(x.startswith(GENERATION_CHANGED) for x in r2.reasons), r2.reasons


def test_model_change_evaluated_with_the_model_passes_when_the_metrics_do():
    base = with_queries(make_report(), configured=DEMO, generation=DEMO)
    cand = with_queries(make_report(), configured=HOSTED, generation=HOSTED)
    r = judge(cand, base, configured=HOSTED, cfg=ANSWERS_GATED)
    assert r.status == "pass", r.reasons


FIXTURE = {**DEMO, "reported_models": ["fixture-grounded-demo-answerer"], "model_answers": 26, "failures": {}}
RECORDED = {**DEMO, "reported_models": ["gpt-4o-mini-2024-07-18"], "model_answers": 26, "failures": {}}
ACCEPT = {"baseline_sha256": "b" * 64, "candidate_sha256": "c" * 64, "reason": "new model", "accepted_by": "jane"}


def test_candidate_answered_by_another_model_needs_a_passing_gate_or_an_acceptance():
    # same provider and served model, but the cassette was re-recorded from the live model
    base = with_queries(make_report(), configured=DEMO, generation=FIXTURE)
    same = judge(with_queries(make_report(), configured=DEMO, generation=FIXTURE), base, DEMO, cfg=ANSWERS_GATED)
    assert same.status == "pass", same.reasons
    # answers judged and no worse: the change passes, and says so
    cand = with_queries(make_report(), configured=DEMO, generation=RECORDED)
    ok = judge(cand, base, DEMO, cfg=ANSWERS_GATED)
    assert ok.status == "pass", ok.reasons
    # the answers regress: blocked, naming the model change
    worse_answers = with_queries(make_report(rank_of=uncited), configured=DEMO, generation=RECORDED)
    blocked = judge(worse_answers, base, DEMO, cfg=ANSWERS_GATED)
    assert blocked.status == "regression"
    change = next(x for x in blocked.reasons if x.startswith(GENERATION_IDENTITY_CHANGED))
    assert "fixture-grounded-demo-answerer" in change and "gpt-4o-mini-2024-07-18" in change
    assert judge(worse_answers, base, DEMO, cfg=ANSWERS_GATED, acceptance=ACCEPT).status == "accepted"
    # a gate that does not judge the answers cannot pass a model change: blocked unless accepted
    unjudged = judge(cand, base, DEMO)
    assert unjudged.status == "regression"
    assert any(x.startswith(GENERATION_IDENTITY_CHANGED) and "does not gate" in x for x in unjudged.reasons)
    assert judge(cand, base, DEMO, acceptance=ACCEPT).status == "accepted"


def test_a_renamed_default_model_evaluated_with_its_new_name_is_not_an_unevaluated_change():
    """The configured model changed (a fixture renamed) and the candidate answered with it: not
    ``generation_changed_without_eval`` (the answer counters beside provider and model are no change);
    the identity change is judged like any other (rule 5)."""
    old = {"provider": "demo_replay", "model": "gpt-4o-mini-2024-07-18"}
    base = with_queries(make_report(), configured=old, generation={**old, "model_answers": 26, "failures": {}})
    cand = with_queries(make_report(), configured=DEMO, generation=FIXTURE)
    ok = judge(cand, base, DEMO, cfg=ANSWERS_GATED)
    assert ok.status == "pass", ok.reasons
    extractive = with_queries(make_report(), configured=DEMO, generation={"provider": "none", "model": "extractive"})
    unevaluated = judge(extractive, base, DEMO, cfg=ANSWERS_GATED)
    assert any(x.startswith(GENERATION_CHANGED) for x in unevaluated.reasons), unevaluated.reasons


def test_cost_and_tokens_from_estimated_counts_are_marked_estimated(repo_root, tmp_path):
    """A fixture's made-up token counts: the gate still judges cost and tokens, and every output
    (the result, the summary, the reasons) says they are estimates; the measured latency is not."""
    from evals.gate_render import summary

    def estimated(report: EvalReport, n: int) -> EvalReport:
        data = report.to_json()
        for i, q in enumerate(data["queries"]):
            q["tokens_estimated"] = i < n
        data["metrics"]["estimated_cost_queries"] = n
        return EvalReport.model_validate(data)

    base = estimated(with_queries(make_report()), 30)
    cand = estimated(with_queries(make_report(), cost="0.5", tokens=500), 30)
    r = judge(cand, base)
    assert r.resources["cost_per_query"].estimated and r.resources["tokens_per_query"].estimated
    assert not r.resources["latency_ratio"].estimated
    assert "30 of 30 candidate queries and 30 of 30 baseline queries" in (r.resources["cost_per_query"].note or "")
    reason = next(x for x in r.reasons if x.startswith("regression: cost_per_query"))
    assert "estimated: the token counts of" in reason
    text = summary(r)
    assert "(estimated)" in text and "were computed, not reported by a provider" in text
    plain = judge(with_queries(make_report(), cost="0.5"), with_queries(make_report()))
    assert not any(c.estimated for c in plain.resources.values()) and "(estimated)" not in summary(plain)


def test_failed_model_calls_fail_the_gate_and_no_acceptance_waives_them():
    base = with_queries(make_report(), configured=DEMO, generation=FIXTURE)
    missed = with_queries(
        make_report(), configured=DEMO, generation={**FIXTURE, "model_answers": 24, "failures": {"ReplayMiss": 2}}
    )
    r = judge(missed, base, DEMO, cfg=ANSWERS_GATED, acceptance=ACCEPT)
    assert r.status == "regression"
    reason = next(x for x in r.reasons if x.startswith(GENERATION_FAILED))
    assert "2 of 30 queries" in reason and "ReplayMiss x2" in reason and "--answers" in reason
    assert any("cannot waive generation_failed" in p for p in r.acceptance.problems)


def test_gate_cli_names_the_generation_change(repo_root, tmp_path):
    base = with_queries(make_report(), configured=DEMO, generation=FIXTURE)
    cand = with_queries(make_report(), configured=DEMO, generation=RECORDED)
    code, out, stdout = run_gate(repo_root, tmp_path, cand, base)
    assert code == 0, out["reasons"]  # the shipped gate judges the answers, and they are no worse
    assert out["audit"]["generation_change"] == (
        "demo_replay/fixture-demo-replay (answered as fixture-grounded-demo-answerer) -> "
        "demo_replay/fixture-demo-replay (answered as gpt-4o-mini-2024-07-18)"
    )
    assert "generation changed: demo_replay/" in stdout


def test_gate_output_carries_audit_metadata(repo_root, tmp_path):
    code, out, stdout = run_gate(
        repo_root, tmp_path, with_queries(make_report(), cost="0.5"), with_queries(make_report())
    )
    assert code == 1
    audit = out["audit"]
    assert audit["generation"] == {"provider": "demo_replay", "model": "fixture-demo-replay"}
    assert audit["embedder"]["model"] and audit["embedder"]["dimension"] and audit["embedder"]["provider"]
    assert len(audit["config_hash"]) == 16 and audit["golden_hash"] and audit["golden_paths"]
    assert out["baseline_sha256"] and out["candidate_sha256"]
    assert "cost_per_query" in out["resources"] and "audit: generation" in stdout


def test_eval_code_version_follows_generation_model_embedder_and_prompts(engine, monkeypatch):
    from evals import code_version
    from rag_engine.engine import Engine

    base = code_version.eval_code_version(engine)
    assert base == code_version.eval_code_version(engine)
    defaults = engine.cfg.defaults
    for change in ({}, {"embedding_model": "hash-embed-384"}):
        cfg = engine.cfg.model_copy(update={"defaults": defaults.model_copy(update=change)})
        other = Engine(cfg, engine.root, engine.env)
        assert (code_version.eval_code_version(other) != base) == bool(change)
    gen = next(m for m in engine.cfg.models if m.role == "generation" and m.name != defaults.generation_model)
    provider = engine.cfg.provider(gen.provider).model_copy(update={"enabled": True, "credential_env": None})
    providers = tuple(provider if p.name == gen.provider else p for p in engine.cfg.providers)
    cfg = engine.cfg.model_copy(
        update={"providers": providers, "defaults": defaults.model_copy(update={"generation_model": gen.name})}
    )
    assert code_version.eval_code_version(Engine(cfg, engine.root, engine.env)) != base
    monkeypatch.setattr("rag_engine.retrieval.answer.INSTRUCTIONS", "Answer briefly.")
    assert code_version.eval_code_version(engine) != base
