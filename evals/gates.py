"""The eval regression gate: is a candidate eval report worse than the baseline, with confidence?

    python -m evals.gates --config config/engine.yaml --report R [--baseline-report B] --output G [--accept A]

Exit codes: 0 pass (or a regression covered by a matching acceptance), 1 regression,
2 incomparable inputs. The JSON result is written to G in every case (also when an input is
unreadable), and a short summary is printed.

The rules, in the order they are checked:

1. **Comparable?** Both reports readable, same golden hash, same query ids with the same gold
   and expectations, at least ``evals.min_queries`` paired queries overall *and* per gated
   metric, and every gated metric known. Otherwise: ``incomparable`` (exit 2); nothing is judged.
2. **Embedder identity.** If the candidate's embedder identity differs from the baseline's, the
   candidate's ``reindex`` must record ``complete: true`` for the candidate identity; else
   ``embedder_changed_without_reindex`` (exit 1). An acceptance cannot waive this: a report
   measured on a half-migrated index does not measure the candidate at all.
3. **Per metric**, over queries where both reports have a value: paired deltas
   ``candidate - baseline``, their mean, and a two-sided ``confidence`` percentile bootstrap
   interval of the mean (``bootstrap_samples`` resamples, ``numpy.random.default_rng(seed)``,
   a fresh generator per metric so one metric's interval never depends on the others). A metric
   **regresses when mean delta < -max_drop AND the interval's upper bound < 0**: worse beyond
   the tolerance, and confidently worse rather than noise. Pairing removes between-query
   variance, which dominates on small golden sets. The same rule is applied to each pack's
   queries alone (``pack_regression``, when the pack has ``evals.pack_min_queries`` paired values
   of the metric; fewer: shown, not judged) and shown, not judged, for each pack's split.
4. **BM25 floor** (candidate alone; on unless ``evals.bm25_margin`` is null). On every pack of
   the candidate's ``systems`` table, the engine's nDCG@10 and MAP@10 must not trail BM25's by
   more than ``bm25_margin`` (both measured in the same run, on the same active chunks and
   questions); else ``bm25_floor`` (exit 1), naming pack, metric and both values. A candidate
   without a systems table (a ``rag-eval-report/1`` file) is ``incomparable`` (exit 2) when the
   floor is on: the check cannot be made, and passing it silently would let an old runner skip
   it. With the floor off such a report is judged on rules 1-3 as before. Like an embedder
   change, an acceptance cannot waive the floor: the margin is policy, changed in config review.
5. **Generation model.** The candidate must have been evaluated with the generation model it is
   judged for: when the gate's config names another default generation model than the candidate
   report was run with, or the configured model changed from the baseline's and the candidate
   answered extractively, ``generation_changed_without_eval`` (exit 1; an acceptance may waive it).
   Every model call of the candidate's run must have answered: a failed call (a ``ReplayMiss``:
   the cassette holds no answer for the exact request; a timeout) left an extractive answer in
   the report, which does not measure the model: ``generation_failed`` (exit 1; an acceptance
   cannot waive it). A candidate answered by another model than the baseline (provider, served
   model, and the models the provider reported, e.g. a cassette re-recorded from a live model:
   ``generation_identity_changed``) needs a passing gate that judges the answers
   (``citation_hit_rate`` and ``insufficient_evidence_accuracy`` gated) or an acceptance; when
   other reasons fail the gate, the change is named among them.
6. **Cost, tokens, latency** (when listed in ``gate_metrics``): ``cost_per_query`` and
   ``tokens_per_query`` (means over the queries) may exceed the baseline's by ``cost_tolerance`` /
   ``tokens_tolerance`` (shares); ``latency_ratio`` is the engine's p50 latency over the p50 of an
   in-run control (the fulltext leg alone on the same questions, same run), so a slower machine
   slows both and does not fail the gate, a slower engine does; it may grow by
   ``latency_ratio_tolerance``. An unknown cost against a known one fails; a value an older
   runner did not record is not judged (said in the result). Acceptances may waive these.
7. **Acceptance.** A regression becomes ``accepted`` (exit 0) only if an acceptance binds the
   sha256 of *these exact* baseline and candidate files and gives a reason and who accepted it.
   A mismatched or invalid acceptance is reported in the result and ignored.

Without ``--baseline-report`` only the candidate's own checks run (the BM25 floor): useful for an
ablation or a new pack before any baseline exists. With the floor off there is nothing to judge
then, which is ``incomparable``.

``evaluate_gate`` is pure (no files, no clock) so the Dagster ``eval_gate`` asset check runs the
very same decision.

This module holds the decision (``evaluate_gate``), ``run`` and the CLI; the parts it combines
live beside it, one concern each: ``evals.gate_models`` (result types, the acceptance file,
shared constants), ``evals.gate_metrics`` (the checks), ``evals.gate_acceptance`` (reading,
judging and auditing an acceptance) and ``evals.gate_render`` (the summary).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evals.gate_acceptance import audit_acceptance, bind_acceptance, judge_acceptance, load_acceptance
from evals.gate_metrics import (
    bm25_floor,
    comparability_problems,
    compare_metric,
    embedder_problem,
    floor_reasons,
    generation_change,
    generation_change_reasons,
    generation_failure,
    generation_problem,
    group_gates,
    group_reasons,
    resource_checks,
    resource_reasons,
)
from evals.gate_models import (
    BM25_FLOOR,
    EMBEDDER_CHANGED,
    EXIT_CODES,
    GENERATION_FAILED,
    RESOURCE_METRICS,
    AcceptanceOutcome,
    FloorCheck,
    GateAudit,
    GatePolicy,
    GateResult,
    GroupGate,
    MetricGate,
    ResourceCheck,
    Status,
)
from evals.gate_render import summary
from evals.report import EvalReport, load_report, report_sha256
from rag_engine.config import EvalsConfig, load_config
from rag_engine.engine import project_root
from rag_engine.errors import EvalInputError, RagError

# ---------------------------------------------------------------------------------------
# Decision


def gate_audit(engine_cfg: Any, candidate: EvalReport | None, baseline: EvalReport | None) -> GateAudit:
    """The audit block of a gate result from the gate's engine config and both reports."""
    from rag_engine.config import config_hash

    gen = engine_cfg.model(engine_cfg.defaults.generation_model)
    emb = engine_cfg.model(engine_cfg.defaults.embedding_model)
    emb_identity = None
    try:
        from rag_engine.providers.registry import ModelSpec

        emb_identity = ModelSpec(model=emb, provider=engine_cfg.provider(emb.provider)).identity if emb else None
    except Exception:  # noqa: BLE001 - the audit records an unknown identity rather than failing the gate
        emb_identity = None
    return GateAudit(
        generation={"provider": gen.provider, "model": gen.served_model} if gen else None,
        embedder=(
            {"provider": emb.provider, "model": emb.served_model, "dimension": emb.dimension, "identity": emb_identity}
            if emb
            else None
        ),
        config_hash=config_hash(engine_cfg),
        golden_paths=tuple(candidate.golden.paths) if candidate else (),
        golden_hash=candidate.golden.hash if candidate else None,
        candidate_generation=candidate.generation.model_dump(mode="json") if candidate else None,
        baseline_generation=baseline.generation.model_dump(mode="json") if baseline else None,
        generation_change=generation_change(candidate, baseline) if candidate else None,
        candidate_embedder=candidate.embedder.identity if candidate else None,
        baseline_embedder=baseline.embedder.identity if baseline else None,
    )


def _result(
    status: Status,
    reasons: Sequence[str],
    *,
    metrics: dict[str, MetricGate] | None = None,
    floor: dict[str, dict[str, FloorCheck]] | None = None,
    candidate_sha: str | None,
    baseline_sha: str | None,
    acceptance: AcceptanceOutcome | None,
    cfg: EvalsConfig | None,
    resources: dict[str, ResourceCheck] | None = None,
    groups: dict[str, GroupGate] | None = None,
    audit: GateAudit | None = None,
) -> GateResult:
    return GateResult(
        status=status,
        exit_code=EXIT_CODES[status],
        reasons=tuple(reasons),
        metrics=metrics or {},
        floor=floor or {},
        baseline_sha256=baseline_sha,
        candidate_sha256=candidate_sha,
        acceptance=acceptance,
        policy=GatePolicy.of(cfg) if cfg is not None else None,
        resources=resources or {},
        groups=groups or {},
        audit=audit,
    )


def evaluate_gate(
    candidate: EvalReport,
    baseline: EvalReport | None,
    cfg: EvalsConfig,
    *,
    candidate_sha: str | None,
    baseline_sha: str | None,
    acceptance: dict[str, Any] | None,
    acceptance_source: str | None = None,
    acceptance_error: str | None = None,
    configured_generation: dict[str, str] | None = None,
    audit: GateAudit | None = None,
) -> GateResult:
    """The gate decision (pure). ``acceptance`` is the decoded acceptance file, or None.

    ``baseline`` None judges the candidate alone (the BM25 floor). ``acceptance_error`` records
    an acceptance file that could not be read: it is reported and, like any mismatched
    acceptance, ignored. ``configured_generation`` ({provider, model}) is the gate config's default
    generation model (rule 5); ``audit`` is copied into the result.
    """
    checks: dict[str, ResourceCheck] = {}
    groups: dict[str, GroupGate] = {}

    def _res(*args: Any, **kwargs: Any) -> GateResult:
        return _result(*args, **kwargs, resources=checks, groups=groups, audit=audit)

    outcome = judge_acceptance(
        acceptance,
        source=acceptance_source,
        error=acceptance_error,
        candidate_sha=candidate_sha,
        baseline_sha=baseline_sha,
    )
    floor, problems = bm25_floor(candidate, cfg)
    if baseline is not None:
        problems = comparability_problems(candidate, baseline, cfg) + problems
    elif cfg.bm25_margin is None:
        problems.append("nothing_to_judge: no baseline report and the BM25 floor is off (evals.bm25_margin: null)")
    if problems:
        if outcome is not None:
            outcome = outcome.model_copy(
                update={"problems": (*outcome.problems, "not applied: incomparable reports cannot be accepted")}
            )
        return _res(
            "incomparable",
            problems,
            floor=floor,
            candidate_sha=candidate_sha,
            baseline_sha=baseline_sha,
            acceptance=outcome,
            cfg=cfg,
        )

    metrics = (
        {m: compare_metric(candidate, baseline, m, cfg) for m in cfg.gate_metrics if m not in RESOURCE_METRICS}
        if baseline is not None
        else {}
    )
    groups.update(group_gates(candidate, baseline, cfg) if baseline is not None else {})
    checks.update(resource_checks(candidate, baseline, cfg) if baseline is not None else {})
    reasons: list[str] = []
    pct = f"{cfg.confidence:.0%}"
    for name, g in metrics.items():
        if g.regressed:
            reasons.append(
                f"regression: {name} mean delta {g.mean_delta:+.4f} < -{cfg.max_drop} "
                f"and {pct} CI [{g.ci_low:+.4f}, {g.ci_high:+.4f}] below 0 (n={g.n})"
            )
    reasons += group_reasons(groups, cfg)
    reasons += resource_reasons(checks)
    generation = generation_problem(candidate, baseline, configured_generation)
    if generation:
        reasons.append(generation)
    unwaivable = floor_reasons(floor)
    embedder = embedder_problem(candidate, baseline) if baseline is not None else None
    if embedder:
        unwaivable.append(embedder)
    failed = generation_failure(candidate)
    if failed:
        unwaivable.append(failed)
    reasons += unwaivable
    reasons += generation_change_reasons(generation_change(candidate, baseline), cfg, blocked=bool(reasons))

    if not reasons:
        if outcome is not None:
            outcome = outcome.model_copy(
                update={"problems": (*outcome.problems, "not applied: no regression to accept")}
            )
        return _res(
            "pass",
            [],
            metrics=metrics,
            floor=floor,
            candidate_sha=candidate_sha,
            baseline_sha=baseline_sha,
            acceptance=outcome,
            cfg=cfg,
        )

    if outcome is not None and outcome.matched and not unwaivable:
        outcome = outcome.model_copy(update={"applied": True})
        reasons.append(
            f"accepted: {outcome.reason} (by {outcome.accepted_by}"
            f"{', ' + outcome.date.isoformat() if outcome.date else ''})"
        )
        return _res(
            "accepted",
            reasons,
            metrics=metrics,
            floor=floor,
            candidate_sha=candidate_sha,
            baseline_sha=baseline_sha,
            acceptance=outcome,
            cfg=cfg,
        )

    if outcome is not None:
        extra: tuple[str, ...] = ()
        if outcome.matched and embedder is not None:
            extra += (
                f"not applied: an acceptance cannot waive {EMBEDDER_CHANGED}; re-index with the new "
                "embedder and re-run the eval",
            )
        if outcome.matched and failed is not None:
            extra += (
                f"not applied: an acceptance cannot waive {GENERATION_FAILED}; the report does not "
                "measure the model: record its answers and re-run the eval",
            )
        if outcome.matched and floor_reasons(floor):
            extra += (
                f"not applied: an acceptance cannot waive the {BM25_FLOOR}; improve the engine or "
                "change evals.bm25_margin in review",
            )
        outcome = outcome.model_copy(update={"problems": outcome.problems + extra})
        reasons.append("acceptance_ignored: " + "; ".join(outcome.problems))
    return _res(
        "regression",
        reasons,
        metrics=metrics,
        floor=floor,
        candidate_sha=candidate_sha,
        baseline_sha=baseline_sha,
        acceptance=outcome,
        cfg=cfg,
    )


# ---------------------------------------------------------------------------------------
# Files and CLI


def _sha_or_none(path: str) -> str | None:
    try:
        return report_sha256(path)
    except (EvalInputError, OSError):
        return None


def run(config: str, report: str, baseline_report: str | None, output: str, accept: str | None = None) -> GateResult:
    """Everything the CLI does except printing; never raises for bad inputs (they are exit 2).
    ``baseline_report`` None: the candidate's own checks only (the BM25 floor)."""
    cand_sha = _sha_or_none(report)
    base_sha = _sha_or_none(baseline_report) if baseline_report is not None else None
    cfg: EvalsConfig | None = None
    engine_cfg = None
    unreadable: list[str] = []
    try:
        engine_cfg = load_config(config)
        cfg = engine_cfg.evals
    except RagError as exc:
        unreadable.append(f"unreadable_input: config: {exc}")
    loaded: dict[str, EvalReport] = {}
    for label, path in (("candidate", report), ("baseline", baseline_report)):
        if path is None:
            continue
        try:
            loaded[label] = load_report(path)
        except EvalInputError as exc:
            unreadable.append(f"unreadable_input: {label} report: {exc}")

    acc_raw, acc_error = None, None
    if accept is not None:
        try:
            acc_raw = load_acceptance(accept)
        except EvalInputError as exc:
            acc_error = str(exc)

    if engine_cfg is not None and acc_error is None:  # who accepted: the one approval rule
        acc_raw, acc_error = bind_acceptance(engine_cfg, project_root(), os.environ, acc_raw)
    if unreadable or cfg is None:
        outcome = judge_acceptance(
            acc_raw, source=accept, error=acc_error, candidate_sha=cand_sha, baseline_sha=base_sha
        )
        result = _result(
            "incomparable", unreadable, candidate_sha=cand_sha, baseline_sha=base_sha, acceptance=outcome, cfg=cfg
        )
    else:
        audit = gate_audit(engine_cfg, loaded["candidate"], loaded.get("baseline"))
        result = evaluate_gate(
            loaded["candidate"],
            loaded.get("baseline"),
            cfg,
            candidate_sha=cand_sha,
            baseline_sha=base_sha,
            acceptance=acc_raw,
            acceptance_source=accept,
            acceptance_error=acc_error,
            configured_generation=audit.generation,
            audit=audit,
        )
    if engine_cfg is not None and acc_raw is not None:
        audit_acceptance(engine_cfg, acc_raw, base_sha, cand_sha, outcome=result.acceptance)
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result.to_json(), indent=2) + "\n", encoding="utf-8")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.gates", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="engine config (its evals: section is the policy)")
    parser.add_argument("--report", required=True, help="candidate eval report (JSON)")
    parser.add_argument(
        "--baseline-report",
        help="baseline eval report (JSON); without it only the candidate's own checks run (the BM25 floor)",
    )
    parser.add_argument("--output", required=True, help="where to write the gate result (JSON)")
    parser.add_argument("--accept", help="acceptance file (YAML or JSON) binding both report hashes")
    args = parser.parse_args(argv)
    try:
        result = run(args.config, args.report, args.baseline_report, args.output, args.accept)
    except OSError as exc:  # the output cannot be written: not a regression, so never exit 1
        print(f"eval gate: cannot write {args.output}: {exc}", file=sys.stderr)
        return EXIT_CODES["incomparable"]
    except RagError as exc:  # the audit trail could not record the acceptance
        print(f"eval gate: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_CODES["incomparable"]
    print(summary(result))
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
