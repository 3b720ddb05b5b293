"""The eval gate's checks: paired bootstrap per metric, comparability, BM25 floor, embedder,
cost/tokens/latency and generation model.

Each check takes the reports (and the ``evals:`` config) and returns a result type of
``evals.gate_models`` or the reasons it fails; ``evals.gates.evaluate_gate`` combines them into
the decision. Imports ``evals.gate_models`` only, of the gate's modules (see its docstring for
the layout).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import numpy as np

from evals.gate_models import (
    ANSWER_METRICS,
    BM25_FLOOR,
    EMBEDDER_CHANGED,
    ESTIMABLE_METRICS,
    FLOOR_METRICS,
    GENERATION_CHANGED,
    GENERATION_FAILED,
    GENERATION_IDENTITY_CHANGED,
    PACK_REGRESSION,
    RESOURCE_METRICS,
    FloorCheck,
    GroupGate,
    MetricGate,
    ResourceCheck,
)
from evals.report import METRIC_NAMES, SCHEMA, EvalReport, GenerationInfo
from rag_engine.config import EvalsConfig
from rag_engine.errors import EvalInputError, IncomparableReports

_FLOAT_SLACK = 1e-12
"""A mean delta of exactly -max_drop is within tolerance; this absorbs float rounding of it."""


# ---------------------------------------------------------------------------------------
# Statistics


def paired_values(
    candidate: EvalReport, baseline: EvalReport, metric: str, ids: frozenset[str] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(candidate, baseline) per-query values of ``metric`` over queries where both are non-null
    (of ``ids`` only, when given: one pack's or split's queries).

    Queries are taken in sorted id order, so the result (and the bootstrap over it) does not
    depend on the order the runner wrote them in.
    """
    if metric not in METRIC_NAMES:
        raise IncomparableReports(f"unknown gate metric {metric!r}; known: {list(METRIC_NAMES)}")
    cand, base = candidate.by_id(), baseline.by_id()
    if cand.keys() != base.keys():
        raise IncomparableReports("the reports hold different query ids")
    c_vals, b_vals = [], []
    for qid in sorted(cand if ids is None else cand.keys() & ids):
        c, b = cand[qid].value(metric), base[qid].value(metric)
        if c is not None and b is not None:
            c_vals.append(c)
            b_vals.append(b)
    return np.asarray(c_vals, dtype=float), np.asarray(b_vals, dtype=float)


def bootstrap_interval(deltas: np.ndarray, *, samples: int, confidence: float, seed: int) -> tuple[float, float]:
    """Two-sided percentile bootstrap interval of the mean of ``deltas`` (deterministic per seed)."""
    deltas = np.asarray(deltas, dtype=float)
    if deltas.size == 0:
        raise IncomparableReports("no paired values to bootstrap")
    if samples < 1 or not 0 < confidence < 1:
        raise EvalInputError(f"bootstrap needs samples >= 1 and 0 < confidence < 1 (got {samples}, {confidence})")
    rng = np.random.default_rng(seed)
    n = deltas.size
    means = np.empty(samples, dtype=float)
    step = max(1, 2_000_000 // n)  # bound memory: at most ~2M indices per batch
    for start in range(0, samples, step):
        stop = min(samples, start + step)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = deltas[idx].mean(axis=1)
    alpha = 1.0 - confidence
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def compare_metric(
    candidate: EvalReport, baseline: EvalReport, metric: str, cfg: EvalsConfig, ids: frozenset[str] | None = None
) -> MetricGate:
    c_vals, b_vals = paired_values(candidate, baseline, metric, ids)
    if c_vals.size == 0:
        raise IncomparableReports(f"{metric}: no query has a value in both reports")
    deltas = c_vals - b_vals
    mean_delta = float(deltas.mean())
    low, high = bootstrap_interval(deltas, samples=cfg.bootstrap_samples, confidence=cfg.confidence, seed=cfg.seed)
    regressed = mean_delta < -cfg.max_drop - _FLOAT_SLACK and high < 0
    return MetricGate(
        baseline_mean=float(b_vals.mean()),
        candidate_mean=float(c_vals.mean()),
        mean_delta=mean_delta,
        ci_low=low,
        ci_high=high,
        n=int(deltas.size),
        regressed=regressed,
    )


def query_groups(candidate: EvalReport) -> dict[str, frozenset[str]]:
    """Query ids per pack (``<pack>``) and per pack and split (``<pack>@<split>``), sorted by name."""
    groups: dict[str, set[str]] = {}
    for q in candidate.queries:
        groups.setdefault(q.pack, set()).add(q.id)
        if q.split is not None:
            groups.setdefault(f"{q.pack}@{q.split}", set()).add(q.id)
    return {name: frozenset(groups[name]) for name in sorted(groups)}


def group_gates(candidate: EvalReport, baseline: EvalReport, cfg: EvalsConfig) -> dict[str, GroupGate]:
    """The pooled comparison again on each pack's and each pack's split's queries alone.

    Pack rows are judged (a metric with fewer than ``pack_min_queries`` paired values is shown,
    its ``regressed`` false); split rows are shown only: a split is a slice of a judged pack, and
    judging every slice would multiply the chances of a false alarm. Both reports hold the same
    queries with the same packs (comparability is checked first), so grouping by the candidate's
    queries groups the baseline's too.
    """
    gated = [m for m in cfg.gate_metrics if m not in RESOURCE_METRICS]
    result: dict[str, GroupGate] = {}
    for name, ids in query_groups(candidate).items():
        judged = "@" not in name
        metrics: dict[str, MetricGate] = {}
        for metric in gated:
            try:
                gate = compare_metric(candidate, baseline, metric, cfg, ids)
            except IncomparableReports:  # no query of the group has the metric in both reports
                continue
            if not judged or gate.n < cfg.pack_min_queries:
                gate = gate.model_copy(update={"regressed": False})
            metrics[metric] = gate
        result[name] = GroupGate(metrics=metrics, judged=judged, n=len(ids))
    return result


def group_reasons(groups: dict[str, GroupGate], cfg: EvalsConfig) -> list[str]:
    pct = f"{cfg.confidence:.0%}"
    return [
        f"{PACK_REGRESSION}: pack {name}: {metric} mean delta {g.mean_delta:+.4f} < -{cfg.max_drop} "
        f"and {pct} CI [{g.ci_low:+.4f}, {g.ci_high:+.4f}] below 0 (n={g.n})"
        for name, group in groups.items()
        for metric in group.regressed_metrics
        for g in (group.metrics[metric],)
    ]


# ---------------------------------------------------------------------------------------
# Checks


def comparability_problems(candidate: EvalReport, baseline: EvalReport, cfg: EvalsConfig) -> list[str]:
    """Why these two reports cannot be compared (empty list: they can)."""
    problems: list[str] = []
    unknown = [m for m in cfg.gate_metrics if m not in METRIC_NAMES + RESOURCE_METRICS]
    if unknown:
        problems.append(f"unknown_gate_metric: {unknown} (known: {list(METRIC_NAMES + RESOURCE_METRICS)})")
    if candidate.golden.hash != baseline.golden.hash:
        problems.append(
            f"golden_hash_mismatch: baseline {baseline.golden.hash[:12]} "
            f"({', '.join(baseline.golden.paths)}) vs candidate {candidate.golden.hash[:12]} "
            f"({', '.join(candidate.golden.paths)})"
        )
    cand, base = candidate.by_id(), baseline.by_id()
    if cand.keys() != base.keys():
        missing = sorted(base.keys() - cand.keys())
        extra = sorted(cand.keys() - base.keys())
        problems.append(
            f"query_ids_mismatch: missing from candidate {missing[:10]}"
            f"{'...' if len(missing) > 10 else ''}, not in baseline {extra[:10]}"
            f"{'...' if len(extra) > 10 else ''}"
        )
    paired = sorted(cand.keys() & base.keys())
    differing = [
        q
        for q in paired
        if set(cand[q].gold) != set(base[q].gold) or cand[q].expect_insufficient != base[q].expect_insufficient
    ]
    if differing:
        problems.append(f"golden_content_mismatch: gold or expectation differs for {differing[:10]}")
    if len(paired) < cfg.min_queries:
        problems.append(f"too_few_queries: {len(paired)} paired queries < evals.min_queries {cfg.min_queries}")
    elif not problems:
        for metric in (m for m in cfg.gate_metrics if m not in RESOURCE_METRICS):
            n = paired_values(candidate, baseline, metric)[0].size
            if n < cfg.min_queries:
                lacking = [
                    label
                    for label, r in (("baseline", baseline), ("candidate", candidate))
                    if all(q.value(metric) is None for q in r.queries)
                ]
                why = (
                    (
                        f" ({' and '.join(lacking)} report has no {metric} values: written by an older "
                        f"runner? re-run it to get {SCHEMA!r})"
                    )
                    if lacking
                    else ""
                )
                problems.append(
                    f"too_few_queries: {metric} has {n} paired values < evals.min_queries {cfg.min_queries}{why}"
                )
    return problems


def bm25_floor(candidate: EvalReport, cfg: EvalsConfig) -> tuple[dict[str, dict[str, FloorCheck]], list[str]]:
    """The BM25 floor on the candidate alone: (checks per pack and metric, problems).

    Problems mean the floor cannot be judged (no systems table while the floor is on); a metric
    a pack has no value for (no answerable query) is skipped. Packs in sorted order.
    """
    margin = cfg.bm25_margin
    if margin is None:
        return {}, []
    if candidate.systems is None:
        return {}, [
            f"{BM25_FLOOR}_unavailable: the candidate report ({candidate.schema_id}) has no systems "
            f"table to compare the engine with BM25; re-run the eval (schema {SCHEMA!r}) or set "
            "evals.bm25_margin: null to turn the floor off"
        ]
    checks: dict[str, dict[str, FloorCheck]] = {}
    for pack in sorted(candidate.systems):
        table = candidate.systems[pack]
        for metric in FLOOR_METRICS:
            engine, bm25 = table.engine.get(metric), table.bm25.get(metric)
            if engine is None or bm25 is None:
                continue
            delta = engine - bm25
            checks.setdefault(pack, {})[metric] = FloorCheck(
                engine=engine, bm25=bm25, delta=delta, margin=margin, failed=delta < -margin - _FLOAT_SLACK
            )
    return checks, []


def floor_reasons(checks: dict[str, dict[str, FloorCheck]]) -> list[str]:
    return [
        f"{BM25_FLOOR}: pack {pack}: {metric} engine {c.engine:.4f} < bm25 {c.bm25:.4f} "
        f"by {-c.delta:.4f} (more than evals.bm25_margin {c.margin})"
        for pack, per in checks.items()
        for metric, c in per.items()
        if c.failed
    ]


def embedder_problem(candidate: EvalReport, baseline: EvalReport) -> str | None:
    """An embedder change is only comparable after a complete re-index with the new embedder."""
    new, old = candidate.embedder.identity, baseline.embedder.identity
    if new == old:
        return None
    ri = candidate.reindex
    if ri is not None and ri.complete and ri.embedder_identity == new:
        return None
    recorded = (
        "no re-index recorded"
        if ri is None
        else (f"re-index recorded for {ri.embedder_identity!r}, complete={ri.complete}")
    )
    return f"{EMBEDDER_CHANGED}: baseline {old!r} -> candidate {new!r}; {recorded}"


def _mean_cost(report: EvalReport) -> float | None:
    costs = [q.cost_usd for q in report.queries]
    known = [c for c in costs if c is not None]
    if not costs or len(known) != len(costs):
        return None
    return float(sum(Decimal(c) for c in known) / len(known))


def _mean_tokens(report: EvalReport) -> float | None:
    tokens = [q.tokens for q in report.queries]
    known = [t for t in tokens if t is not None]
    return None if not tokens or len(known) != len(tokens) else float(np.mean(known))


def _latency_ratio(report: EvalReport) -> float | None:
    control = [q.control_latency_ms for q in report.queries]
    known = [c for c in control if c is not None]
    if not control or len(known) != len(control):
        return None
    base = float(np.median(known))
    return float(np.median([q.latency_ms for q in report.queries])) / max(base, 1e-3)


_RESOURCE_VALUE = {
    "cost_per_query": (_mean_cost, "cost_tolerance"),
    "tokens_per_query": (_mean_tokens, "tokens_tolerance"),
    "latency_ratio": (_latency_ratio, "latency_ratio_tolerance"),
}


def estimated_note(candidate: EvalReport, baseline: EvalReport) -> str | None:
    """Which report's cost and tokens rest on estimated token counts, in words; None when neither's do."""
    parts = []
    for label, report in (("candidate", candidate), ("baseline", baseline)):
        n = report.metrics.estimated_cost_queries
        if n:
            parts.append(f"{n} of {len(report.queries)} {label} queries")
    if not parts:
        return None
    return (
        f"estimated: the token counts of {' and '.join(parts)} were computed, not reported by a provider "
        "(a replay fixture's characters / 4)"
    )


def resource_checks(candidate: EvalReport, baseline: EvalReport, cfg: EvalsConfig) -> dict[str, ResourceCheck]:
    """Cost per query, tokens per query and the latency ratio to the in-run control, each against
    the baseline's with its relative tolerance from config (only those listed in gate_metrics).
    Cost and tokens resting on estimated token counts are marked ``estimated``, with a note."""
    out: dict[str, ResourceCheck] = {}
    estimated = estimated_note(candidate, baseline)
    for metric in (m for m in cfg.gate_metrics if m in RESOURCE_METRICS):
        value, tol_key = _RESOURCE_VALUE[metric]
        tol = float(getattr(cfg, tol_key))
        b, c = value(baseline), value(candidate)
        out[metric] = _resource_check(metric, b, c, tol)
        if estimated and metric in ESTIMABLE_METRICS:
            check = out[metric]
            note = f"{check.note}; {estimated}" if check.note else estimated
            out[metric] = check.model_copy(update={"estimated": True, "note": note})
    return out


def _resource_check(metric: str, b: float | None, c: float | None, tol: float) -> ResourceCheck:
    """One resource figure against the baseline's: unknown against known cost fails, a missing value is not judged."""
    if c is None and b is not None and metric == "cost_per_query":
        return ResourceCheck(
            baseline=b,
            candidate=None,
            tolerance=tol,
            judged=True,
            regressed=True,
            note="candidate cost unknown (a model without pricing) against a known baseline cost",
        )
    if b is None or c is None:
        missing = " and ".join(label for label, v in (("baseline", b), ("candidate", c)) if v is None)
        return ResourceCheck(
            baseline=b,
            candidate=c,
            tolerance=tol,
            judged=False,
            regressed=False,
            note=f"not judged: the {missing} report has no {metric} (unknown cost, "
            "or written by an older runner: re-run it)",
        )
    return ResourceCheck(baseline=b, candidate=c, tolerance=tol, judged=True, regressed=c > b * (1 + tol) + 1e-12)


def resource_reasons(checks: dict[str, ResourceCheck]) -> list[str]:
    out = []
    for name, r in checks.items():
        if not r.regressed:
            continue
        if r.candidate is None:
            out.append(f"regression: {name}: {r.note}")
        else:
            growth = "from 0" if not r.baseline else f"{r.candidate / r.baseline - 1:+.1%}"
            out.append(
                f"regression: {name} baseline {r.baseline:.6g} -> candidate {r.candidate:.6g} "
                f"({growth}, more than the tolerance {r.tolerance:.0%})" + (f"; {r.note}" if r.estimated else "")
            )
    return out


def _gen(info: Any) -> str:
    return f"{info.provider}/{info.model}"


def generation_problem(
    candidate: EvalReport, baseline: EvalReport | None, configured: dict[str, str] | None = None
) -> str | None:
    """A generation-model change that the candidate report did not evaluate.

    ``configured``: the default generation provider/model of the config the gate runs with. The
    candidate must have been run with it configured; and when the configured model changed from
    the baseline's, the candidate must have answered with it (not extractively)."""
    cand_cfg = candidate.configured_generation
    if (
        configured is not None
        and cand_cfg is not None
        and (cand_cfg.provider, cand_cfg.model) != (configured["provider"], configured["model"])
    ):
        return (
            f"{GENERATION_CHANGED}: the config names {configured['provider']}/{configured['model']} as the "
            f"default generation model; the candidate report was run with {_gen(cand_cfg)}: run the eval "
            "again (python -m evals.runner --generate)"
        )
    base_cfg = baseline.configured_generation if baseline is not None else None
    answered = candidate.generation
    if (
        cand_cfg is not None
        and base_cfg is not None
        and cand_cfg != base_cfg
        and (answered.provider, answered.model) != (cand_cfg.provider, cand_cfg.model)  # e.g. extractive
    ):
        return (
            f"{GENERATION_CHANGED}: default generation model {_gen(base_cfg)} -> {_gen(cand_cfg)}, but the "
            f"candidate answered with {_gen(candidate.generation)}: run the eval without --extractive"
        )
    return None


def generation_failure(candidate: EvalReport) -> str | None:
    """Model calls of the candidate's run that failed: those queries were answered extractively,
    so the report does not measure the model it names (never waivable)."""
    gen = candidate.generation
    if not gen.failed:
        return None
    kinds = ", ".join(f"{kind} x{n}" for kind, n in sorted((gen.failures or {}).items()))
    failed = [q.id for q in candidate.queries if q.answer_error is not None or q.answer_method == "extractive"]
    hint = (
        ": the replay cassette holds no answer for these exact requests (a prompt, context or corpus "
        "change); re-record it with python -m evals.cassettes.build_demo_cassette --answers"
        if "ReplayMiss" in (gen.failures or {})
        else ""
    )
    return (
        f"{GENERATION_FAILED}: {gen.failed} of {len(candidate.queries)} queries were not answered by "
        f"{_gen(gen)} ({kinds}), e.g. {failed[:5]}{hint}; their extractive fallback does not measure the model"
    )


def same_generation(candidate: GenerationInfo, baseline: GenerationInfo) -> bool:
    """The same model answered both reports: provider and served model, and the models the provider
    reported (a re-recorded cassette, or a provider's new model version) when both reports have them."""
    if (candidate.provider, candidate.model) != (baseline.provider, baseline.model):
        return False
    if candidate.reported_models is None or baseline.reported_models is None:
        return True
    return set(candidate.reported_models) == set(baseline.reported_models)


def generation_change(candidate: EvalReport, baseline: EvalReport | None) -> str | None:
    """``baseline identity -> candidate identity`` when another model answered the candidate."""
    if baseline is None or same_generation(candidate.generation, baseline.generation):
        return None
    return f"{baseline.generation.identity()} -> {candidate.generation.identity()}"


def generation_change_reasons(change: str | None, cfg: EvalsConfig, blocked: bool) -> list[str]:
    """A candidate answered by another model than the baseline needs a passing gate that judges
    the answers (``ANSWER_METRICS`` gated), or an acceptance. ``blocked``: other reasons already fail it."""
    if change is None:
        return []
    unjudged = [m for m in ANSWER_METRICS if m not in cfg.gate_metrics]
    if unjudged:
        return [
            f"{GENERATION_IDENTITY_CHANGED}: {change}, but evals.gate_metrics does not gate {unjudged}, so the "
            "gate cannot judge the new model's answers: gate them, or accept the change"
        ]
    if blocked:
        return [
            f"{GENERATION_IDENTITY_CHANGED}: {change}: the model change is blocked until the reasons "
            "above are fixed or accepted"
        ]
    return []
