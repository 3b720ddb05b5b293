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
   variance, which dominates on small golden sets.
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
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import sys
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evals.report import METRIC_NAMES, SCHEMA, EvalReport, GenerationInfo, load_report, report_sha256
from rag_engine import yaml_safe
from rag_engine.config import EvalsConfig, load_config
from rag_engine.errors import ApprovalError, EvalInputError, IncomparableReports, RagError
from rag_engine.governance.approvals import ACCEPT_GATE_REGRESSION, Approval, inputs_hash, require

GATE_SCHEMA: Final = "rag-eval-gate/2"
Status = Literal["pass", "regression", "accepted", "incomparable"]
EXIT_CODES: dict[str, int] = {"pass": 0, "accepted": 0, "regression": 1, "incomparable": 2}
EMBEDDER_CHANGED = "embedder_changed_without_reindex"
GENERATION_CHANGED = "generation_changed_without_eval"
GENERATION_FAILED = "generation_failed"
GENERATION_IDENTITY_CHANGED = "generation_identity_changed"
ANSWER_METRICS: tuple[str, ...] = ("citation_hit_rate", "insufficient_evidence_accuracy")
"""The gate metrics that judge generated answers: a generation change is judged only if both are gated."""
RESOURCE_METRICS: tuple[str, ...] = ("cost_per_query", "tokens_per_query", "latency_ratio")
"""Gate metrics where lower is better, judged by a relative tolerance (not the bootstrap)."""
BM25_FLOOR = "bm25_floor"
FLOOR_METRICS: tuple[str, ...] = ("ndcg@10", "map@10")
"""Engine vs BM25, per pack: rank quality over the whole top 10 (graded by position, and by
precision at every hit), where a fused engine should beat a single lexical scorer."""
_FLOAT_SLACK = 1e-12
"""A mean delta of exactly -max_drop is within tolerance; this absorbs float rounding of it."""

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MetricGate(_Frozen):
    baseline_mean: float
    candidate_mean: float
    mean_delta: float
    ci_low: float
    ci_high: float
    n: int
    regressed: bool


class FloorCheck(_Frozen):
    """One pack and metric of the BM25 floor: engine and BM25 means over the pack's answerable queries."""

    engine: float
    bm25: float
    delta: float
    """engine - bm25"""
    margin: float
    failed: bool
    """delta < -margin: the engine trails BM25 by more than the margin."""


class ResourceCheck(_Frozen):
    """One cost/token/latency gate metric: means (or ratios) of both reports and the allowed growth."""

    baseline: float | None
    candidate: float | None
    tolerance: float
    judged: bool
    regressed: bool
    note: str | None = None


class GateAudit(_Frozen):
    """What the gate judged, recorded in its own output so it is auditable without the reports."""

    generation: dict[str, str] | None = None
    """The default generation provider and model of the gate's config."""
    embedder: dict[str, Any] | None = None
    """The configured embedder: provider, model, dimension, identity."""
    config_hash: str | None = None
    """Secret-redacted hash of the gate's config."""
    golden_paths: tuple[str, ...] = ()
    golden_hash: str | None = None
    candidate_generation: dict[str, Any] | None = None
    baseline_generation: dict[str, Any] | None = None
    generation_change: str | None = None
    """``baseline identity -> candidate identity`` when the model that answered differs (rule 5)."""
    candidate_embedder: str | None = None
    baseline_embedder: str | None = None


class Acceptance(_Frozen):
    """An acceptance file: a human decision that binds two exact report files."""

    baseline_sha256: Sha256
    candidate_sha256: Sha256
    reason: str
    accepted_by: str
    date: dt.date | None = None

    @field_validator("baseline_sha256", "candidate_sha256", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("reason", "accepted_by")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()

    def as_approval(self) -> Approval:
        """The acceptance as the one approval type: action ``accept_gate_regression`` bound to
        both report hashes (``acceptance_inputs``); ``at`` is its date, else now."""
        at = {"at": dt.datetime.combine(self.date, dt.time(0), tzinfo=dt.UTC)} if self.date else {}
        return Approval(
            approved_by=self.accepted_by,
            reason=self.reason,
            action=ACCEPT_GATE_REGRESSION,
            inputs_hash=inputs_hash(acceptance_inputs(self.baseline_sha256, self.candidate_sha256)),
            **at,
        )


def acceptance_inputs(baseline_sha: str | None, candidate_sha: str | None) -> dict[str, str | None]:
    """What accepting a gate regression acts on: the two exact report files."""
    return {"baseline_sha256": baseline_sha, "candidate_sha256": candidate_sha}


class AcceptanceOutcome(_Frozen):
    source: str | None = None
    baseline_sha256: str | None = None
    candidate_sha256: str | None = None
    reason: str | None = None
    accepted_by: str | None = None
    date: dt.date | None = None
    matched: bool
    """The acceptance is valid and binds exactly the two files being compared."""
    applied: bool
    """It turned a regression into ``accepted``."""
    problems: tuple[str, ...] = ()


class GatePolicy(_Frozen):
    gate_metrics: tuple[str, ...]
    max_drop: float
    bootstrap_samples: int
    confidence: float
    seed: int
    min_queries: int
    bm25_margin: float | None
    cost_tolerance: float | None = None
    tokens_tolerance: float | None = None
    latency_ratio_tolerance: float | None = None

    @classmethod
    def of(cls, cfg: EvalsConfig) -> GatePolicy:
        return cls(**{k: getattr(cfg, k) for k in cls.model_fields})


class GateResult(_Frozen):
    schema_id: Literal["rag-eval-gate/2"] = Field(GATE_SCHEMA, alias="schema")
    status: Status
    exit_code: int
    reasons: tuple[str, ...]
    metrics: dict[str, MetricGate]
    floor: dict[str, dict[str, FloorCheck]] = {}
    """pack -> metric -> the BM25 floor check (empty when the floor is off or was not judged)."""
    baseline_sha256: str | None
    candidate_sha256: str | None
    acceptance: AcceptanceOutcome | None
    policy: GatePolicy | None
    resources: dict[str, ResourceCheck] = {}
    """cost_per_query, tokens_per_query, latency_ratio when gated."""
    audit: GateAudit | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    @property
    def regressed_metrics(self) -> tuple[str, ...]:
        return tuple(name for name, m in self.metrics.items() if m.regressed)

    @property
    def floor_failures(self) -> tuple[tuple[str, str], ...]:
        return tuple((pack, m) for pack, checks in self.floor.items() for m, c in checks.items() if c.failed)


# ---------------------------------------------------------------------------------------
# Statistics


def paired_values(candidate: EvalReport, baseline: EvalReport, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(candidate, baseline) per-query values of ``metric`` over queries where both are non-null.

    Queries are taken in sorted id order, so the result (and the bootstrap over it) does not
    depend on the order the runner wrote them in.
    """
    if metric not in METRIC_NAMES:
        raise IncomparableReports(f"unknown gate metric {metric!r}; known: {list(METRIC_NAMES)}")
    cand, base = candidate.by_id(), baseline.by_id()
    if cand.keys() != base.keys():
        raise IncomparableReports("the reports hold different query ids")
    c_vals, b_vals = [], []
    for qid in sorted(cand):
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


def compare_metric(candidate: EvalReport, baseline: EvalReport, metric: str, cfg: EvalsConfig) -> MetricGate:
    c_vals, b_vals = paired_values(candidate, baseline, metric)
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


# ---------------------------------------------------------------------------------------
# Decision


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


def resource_checks(candidate: EvalReport, baseline: EvalReport, cfg: EvalsConfig) -> dict[str, ResourceCheck]:
    """Cost per query, tokens per query and the latency ratio to the in-run control, each against
    the baseline's with its relative tolerance from config (only those listed in gate_metrics)."""
    out: dict[str, ResourceCheck] = {}
    for metric in (m for m in cfg.gate_metrics if m in RESOURCE_METRICS):
        value, tol_key = _RESOURCE_VALUE[metric]
        tol = float(getattr(cfg, tol_key))
        b, c = value(baseline), value(candidate)
        if c is None and b is not None and metric == "cost_per_query":
            out[metric] = ResourceCheck(
                baseline=b,
                candidate=None,
                tolerance=tol,
                judged=True,
                regressed=True,
                note="candidate cost unknown (a model without pricing) against a known baseline cost",
            )
        elif b is None or c is None:
            missing = " and ".join(label for label, v in (("baseline", b), ("candidate", c)) if v is None)
            out[metric] = ResourceCheck(
                baseline=b,
                candidate=c,
                tolerance=tol,
                judged=False,
                regressed=False,
                note=f"not judged: the {missing} report has no {metric} (unknown cost, "
                "or written by an older runner: re-run it)",
            )
        else:
            allowed = b * (1 + tol)
            out[metric] = ResourceCheck(
                baseline=b, candidate=c, tolerance=tol, judged=True, regressed=c > allowed + 1e-12
            )
    return out


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
                f"({growth}, more than the tolerance {r.tolerance:.0%})"
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
    if cand_cfg is not None and base_cfg is not None and cand_cfg != base_cfg and candidate.generation != cand_cfg:
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


def _judge_acceptance(
    raw: dict[str, Any] | None,
    *,
    source: str | None,
    error: str | None,
    candidate_sha: str | None,
    baseline_sha: str | None,
) -> AcceptanceOutcome | None:
    if raw is None and error is None:
        return None
    if error is not None:
        return AcceptanceOutcome(source=source, matched=False, applied=False, problems=(error,))
    if not isinstance(raw, dict):
        return AcceptanceOutcome(
            source=source,
            matched=False,
            applied=False,
            problems=(f"an acceptance must be a mapping, got {type(raw).__name__}",),
        )
    try:
        acc = Acceptance.model_validate(raw)
    except ValidationError as exc:
        invalid = tuple(
            f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: "
            f"{'unknown key' if e['type'] == 'extra_forbidden' else e['msg']}"
            for e in exc.errors()
        )
        return AcceptanceOutcome(source=source, matched=False, applied=False, problems=invalid)
    problems: list[str] = []
    if acc.baseline_sha256 != baseline_sha:
        problems.append(
            f"baseline_sha256 {acc.baseline_sha256[:12]} does not match the baseline report "
            f"({(baseline_sha or 'unknown')[:12]})"
        )
    if acc.candidate_sha256 != candidate_sha:
        problems.append(
            f"candidate_sha256 {acc.candidate_sha256[:12]} does not match the candidate report "
            f"({(candidate_sha or 'unknown')[:12]})"
        )
    if not problems:  # the one approval path: an acceptance is an Approval of accept_gate_regression
        try:
            require(acc.as_approval(), ACCEPT_GATE_REGRESSION, acceptance_inputs(baseline_sha, candidate_sha))
        except ApprovalError as exc:
            problems.append(str(exc))
    return AcceptanceOutcome(
        source=source, **acc.model_dump(), matched=not problems, applied=False, problems=tuple(problems)
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

    def _res(*args: Any, **kwargs: Any) -> GateResult:
        return _result(*args, **kwargs, resources=checks, audit=audit)

    outcome = _judge_acceptance(
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
    checks.update(resource_checks(candidate, baseline, cfg) if baseline is not None else {})
    reasons: list[str] = []
    pct = f"{cfg.confidence:.0%}"
    for name, g in metrics.items():
        if g.regressed:
            reasons.append(
                f"regression: {name} mean delta {g.mean_delta:+.4f} < -{cfg.max_drop} "
                f"and {pct} CI [{g.ci_low:+.4f}, {g.ci_high:+.4f}] below 0 (n={g.n})"
            )
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


def load_acceptance(path: str | Path) -> dict[str, Any]:
    """Decode an acceptance file (JSON or YAML); EvalInputError when missing or malformed."""
    path = Path(path)
    if not path.is_file():
        raise EvalInputError(f"acceptance file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml_safe.load(text, source=path)
    except (UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
        raise EvalInputError(f"{path}: acceptance is not valid JSON/YAML: {exc}") from None
    if not isinstance(data, dict):
        raise EvalInputError(f"{path}: an acceptance must be a mapping of keys to values")
    return data


def summary(result: GateResult) -> str:
    """A few human lines: status, one line per gated metric, the reasons."""
    lines = [f"eval gate: {result.status.upper()} (exit {result.exit_code})"]
    for name, g in result.metrics.items():
        flag = "  REGRESSED" if g.regressed else ""
        lines.append(
            f"  {name:<32} baseline {g.baseline_mean:.4f}  candidate {g.candidate_mean:.4f}  "
            f"delta {g.mean_delta:+.4f}  CI [{g.ci_low:+.4f}, {g.ci_high:+.4f}]  n={g.n}{flag}"
        )
    for pack, per in result.floor.items():
        for metric, c in per.items():
            flag = "  BELOW BM25" if c.failed else ""
            lines.append(
                f"  floor {pack + ' ' + metric:<26} bm25 {c.bm25:.4f}  engine {c.engine:.4f}  "
                f"delta {c.delta:+.4f}  margin {c.margin}{flag}"
            )

    def fmt(v: float | None) -> str:
        return "unknown" if v is None else f"{v:.6g}"

    for name, r in result.resources.items():
        flag = "  REGRESSED" if r.regressed else ("" if r.judged else "  (not judged)")
        lines.append(
            f"  {name:<32} baseline {fmt(r.baseline)}  candidate {fmt(r.candidate)}  tolerance +{r.tolerance:.0%}{flag}"
        )
    if result.audit is not None:
        a = result.audit
        gen = f"{a.generation['provider']}/{a.generation['model']}" if a.generation else "-"
        emb = f"{a.embedder['provider']}/{a.embedder['model']} ({a.embedder['dimension']})" if a.embedder else "-"
        lines.append(
            f"  audit: generation {gen}; embedder {emb}; config {a.config_hash}; golden "
            f"{(a.golden_hash or '-')[:12]} ({', '.join(a.golden_paths)}); reports baseline "
            f"{(result.baseline_sha256 or '-')[:12]} candidate {(result.candidate_sha256 or '-')[:12]}"
        )
        if a.generation_change:
            lines.append(f"  generation changed: {a.generation_change}")
    lines += [f"  - {r}" for r in result.reasons]
    if result.acceptance is not None and not result.acceptance.applied and result.status == "pass":
        lines += [f"  acceptance: {p}" for p in result.acceptance.problems]
    return "\n".join(lines)


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

    if unreadable or cfg is None:
        outcome = _judge_acceptance(
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
        _audit_acceptance(engine_cfg, acc_raw, base_sha, cand_sha, outcome=result.acceptance)
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result.to_json(), indent=2) + "\n", encoding="utf-8")
    return result


def _audit_acceptance(
    engine_cfg: Any, raw: Any, base_sha: str | None, cand_sha: str | None, *, outcome: AcceptanceOutcome | None
) -> None:
    """Write the acceptance to the audit trail (the ledger database) as an approval check:
    ``approval_granted`` when it was applied, ``approval_refused`` when it does not bind these
    reports; nothing when it matched but had no regression to waive."""
    if outcome is None or (outcome.matched and not outcome.applied):
        return
    import os

    from rag_engine.governance.audit import AuditTrail
    from rag_engine.providers.ledger import ledger_url

    try:
        acc = Acceptance.model_validate(raw)
    except ValidationError:
        return  # not an approval at all: reported under acceptance.problems
    trail = AuditTrail(ledger_url(engine_cfg, os.environ, Path(__file__).resolve().parents[1]))
    try:
        inputs = acceptance_inputs(base_sha, cand_sha)
        # refused: recorded, and the gate reports it under acceptance.problems
        with contextlib.suppress(ApprovalError):
            require(acc.as_approval(), ACCEPT_GATE_REGRESSION, inputs, audit=trail)
    finally:
        trail.dispose()


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
