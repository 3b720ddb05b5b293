"""eval_report and its blocking eval_gate check: the same logic as `python -m evals.gates`.

eval_report runs the golden packs through the query path and stores the report under
var/reports/ (latest.json plus one per run). With ``from_report`` it records a report that
``python -m evals.runner`` already wrote for this config and golden set instead of running the
queries again (CI: `make eval-gate-dagster` after `make eval`); the file is copied byte for byte,
so an acceptance bound to its hash applies to both gates. eval_gate compares it with the baseline
report the config names (``evals.baseline``); an acceptance file in evals/acceptances/ whose hashes
bind this baseline and this candidate turns a regression into a pass, anything else fails the check
(ERROR, blocking). Its comparison table has a row per gated figure (metrics, cost/tokens/latency,
the BM25 floor) and per reason no row shows, so a failed check never shows only passing rows. Each
result is also written to ``evals.reports_dir/gate.json`` (``record_gate``), one of the files `rag
status` reads, so the two do not disagree.
"""

import json
import shutil
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg

from evals.code_version import eval_code_version
from evals.gate_acceptance import bind_acceptance, load_acceptance
from evals.gate_models import BM25_FLOOR, EXIT_CODES, PACK_REGRESSION, GateResult, MetricGate
from evals.gates import evaluate_gate
from evals.report import EvalReport, dump_report, golden_sha256, load_report, report_sha256
from evals.runner import run_eval
from rag_assets.automation import (
    EVAL_REPORT_GENERATES,
    PaidApproval,
    eval_estimate,
    eval_step,
    require_paid_approval,
)
from rag_assets.failures import engine_errors
from rag_assets.resources import EngineResource
from rag_assets.run_costs import run_costs_tagged
from rag_engine.config import config_hash, under_root
from rag_engine.engine import Engine
from rag_engine.errors import EvalInputError


class EvalReportConfig(PaidApproval):
    from_report: str | None = None
    """A report `python -m evals.runner` wrote for this config and golden set: recorded as this
    materialization instead of running the queries again. None: run the eval."""


def recorded_report(engine: Engine, path: Path, golden_paths: list[Path]) -> EvalReport:
    """The report at ``path`` if it was made with this engine config and these golden files
    (EvalInputError otherwise: a stale report must not pass for this code)."""
    report = load_report(path)
    problems = []
    if report.config_hash != config_hash(engine.cfg):
        problems.append(f"config hash {report.config_hash} is not this config's {config_hash(engine.cfg)}")
    if report.golden.hash != golden_sha256(golden_paths):
        problems.append("golden files changed since it was written")
    if problems:
        raise EvalInputError(f"eval report {path} was not made for this engine: {'; '.join(problems)}")
    return report


def _acceptance_for(folder: Path, baseline_sha: str, candidate_sha: str) -> tuple[dict[str, Any] | None, str | None]:
    for path in sorted(folder.glob("*")):
        if path.suffix.lower() not in {".yaml", ".yml", ".json"}:
            continue
        try:
            data = load_acceptance(path)
        except EvalInputError:
            continue
        if (
            str(data.get("baseline_sha256", "")).lower() == baseline_sha
            and str(data.get("candidate_sha256", "")).lower() == candidate_sha
        ):
            return data, path.name
    return None, None


GATE_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("figure", "string", description="the gated figure; a BM25 floor row names its pack"),
        dg.TableColumn(
            "kind",
            "string",
            description="metric (paired bootstrap, all queries), pack (the same on one pack's queries: "
            "judged), split (one pack's split: shown), resource (relative tolerance), bm25_floor (engine vs "
            "BM25 in the same run), or a reason no figure shows (incomparable inputs, a model change)",
        ),
        dg.TableColumn("candidate", "float"),
        dg.TableColumn("baseline", "float", description="the baseline report's value; BM25's for a floor row"),
        dg.TableColumn("delta", "float", description="candidate - baseline"),
        dg.TableColumn(
            "limit",
            "float",
            description="the bound the candidate is judged against: at least baseline - max_drop (metric), "
            "at most baseline x (1 + tolerance) (resource), at least BM25 - bm25_margin (floor)",
        ),
        dg.TableColumn("ci_low", "float", description="bootstrap interval of the delta (metric rows)"),
        dg.TableColumn("ci_high", "float", description="a metric regresses only when this is below 0 too"),
        dg.TableColumn("n", "int", description="paired queries (metric rows)"),
        dg.TableColumn("regressed", "bool", description="null: not judged"),
        dg.TableColumn("note", "string"),
    ]
)


def _num(value: float | None) -> float | None:
    """Six significant digits: short in the UI, and a cost of 0.00004 per query stays visible."""
    return None if value is None else float(f"{value:.6g}")


def _row(figure: str, kind: str, **values: Any) -> dg.TableRecord:
    """A row with every column of GATE_SCHEMA (unset ones null), numbers rounded by ``_num``."""
    row: dict[str, Any] = {c.name: None for c in GATE_SCHEMA.columns}
    row.update(figure=figure, kind=kind)
    for key, value in values.items():
        row[key] = _num(value) if isinstance(value, float) else value
    return dg.TableRecord(row)


def _paired_row(figure: str, kind: str, m: MetricGate, max_drop: float | None, **extra: Any) -> dg.TableRecord:
    """A row of one paired comparison (pooled, a pack's or a split's): means, delta, bound, interval."""
    return _row(
        figure,
        kind,
        candidate=m.candidate_mean,
        baseline=m.baseline_mean,
        delta=m.mean_delta,
        limit=None if max_drop is None else m.baseline_mean - max_drop,
        ci_low=m.ci_low,
        ci_high=m.ci_high,
        n=m.n,
        **{"regressed": m.regressed, **extra},
    )


def metric_rows(result: GateResult) -> list[dg.TableRecord]:
    max_drop = result.policy.max_drop if result.policy is not None else None
    return [_paired_row(name, "metric", m, max_drop) for name, m in result.metrics.items()]


def group_rows(result: GateResult) -> list[dg.TableRecord]:
    """A row per pack and metric (judged) and per pack's split and metric (shown): the pooled
    comparison on that group's queries alone, so the page says which pack moved."""
    max_drop = result.policy.max_drop if result.policy is not None else None
    return [
        _paired_row(f"{name}: {metric}", "pack", m, max_drop)
        if group.judged
        else _paired_row(
            f"{name}: {metric}", "split", m, max_drop, regressed=None, note="shown, not judged: a slice of its pack"
        )
        for name, group in result.groups.items()
        for metric, m in group.metrics.items()
    ]


def resource_rows(result: GateResult) -> list[dg.TableRecord]:
    rows = []
    for name, r in result.resources.items():
        rows.append(
            _row(
                name,
                "resource",
                candidate=r.candidate,
                baseline=r.baseline,
                delta=r.candidate - r.baseline if r.candidate is not None and r.baseline is not None else None,
                limit=None if r.baseline is None else r.baseline * (1 + r.tolerance),
                regressed=r.regressed if r.judged else None,
                note="; ".join(n for n in (r.note, f"at most {r.tolerance:.0%} above the baseline") if n),
            )
        )
    return rows


def floor_rows(result: GateResult) -> list[dg.TableRecord]:
    return [
        _row(
            f"{metric} ({pack})",
            "bm25_floor",
            candidate=c.engine,
            baseline=c.bm25,
            delta=c.delta,
            limit=c.bm25 - c.margin,
            regressed=c.failed,
            note=f"engine vs BM25 on pack {pack}, same run; margin {c.margin}",
        )
        for pack, checks in result.floor.items()
        for metric, c in checks.items()
    ]


def reason_rows(reasons: Sequence[str], kind: str) -> list[dg.TableRecord]:
    """A row per reason, its code as the figure and the rest as the note."""
    rows = []
    for reason in reasons:
        code, _, rest = reason.partition(":")
        rows.append(_row(code.strip(), kind, note=rest.strip() or None))
    return rows


def gate_table(result: GateResult) -> dg.TableMetadataValue:
    """Every figure the gate judged, one row each: the metrics, cost/tokens/latency and the BM25
    floor, with the same columns; then the reasons no row shows (incomparable inputs, an embedder
    or generation change, an acceptance), so the table is never empty when the gate has a reason."""
    # a regressed metric, pack or resource, a failed floor: a row says so
    shown = ("regression: ", f"{BM25_FLOOR}: ", f"{PACK_REGRESSION}: ")
    kind = "incomparable" if result.status == "incomparable" else "reason"
    rows = [
        *metric_rows(result),
        *group_rows(result),
        *resource_rows(result),
        *floor_rows(result),
        *reason_rows([r for r in result.reasons if not r.startswith(shown)], kind),
    ]
    return dg.MetadataValue.table(rows, schema=GATE_SCHEMA)


CHECK_NAME = "eval_report:eval_gate"
GATE_FILE = "gate.json"


def record_gate(engine: Engine, result: GateResult, log: Any) -> str:
    """The check's result as ``evals.reports_dir/gate.json``, in the format of `python -m evals.gates
    --output` (``make eval-gate`` writes ``var/eval/gate.json``): `rag status` shows the newest of the
    two, so it says what the check in the UI says. Returns where it went, or why it did not (a gate
    whose file cannot be written still judges)."""
    path = under_root(engine.root, engine.cfg.evals.reports_dir) / GATE_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result.to_json(), indent=2, default=str) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        log.warning("eval gate: cannot write %s (%s): `rag status` will not show this result", path, exc)
        return f"not written: {type(exc).__name__}"
    return str(path.relative_to(engine.root)) if path.is_relative_to(engine.root) else str(path)


def build_eval_assets(pack_keys: list[dg.AssetKey], engine: Engine, config_path: str) -> list[dg.AssetsDefinition]:
    gen_free = eval_estimate(engine)["cost_usd"] == 0  # an extractive eval is free whatever the model's price

    @dg.asset(
        name="eval_report",
        group_name="platform",
        deps=pack_keys,
        kinds={"python"},
        code_version=eval_code_version(engine),
        owners=["team:rag-platform"],
        tags={"cost": "free" if gen_free else "paid", "model": "generation"},
        automation_condition=eval_step(config_path, [k for k in pack_keys if k.path[-1] == "graph_writes"]),
        freshness_policy=dg.FreshnessPolicy.time_window(fail_window=timedelta(days=7), warn_window=timedelta(days=2)),
        description="Golden query packs through the query path: recall, MRR, nDCG, citations, "
        "insufficient evidence, latency, cost per query. Re-runs after index or graph "
        "changes and when the generation model, embedder or prompts change; gated by "
        "the blocking eval_gate check.",
    )
    def eval_report(
        context: dg.AssetExecutionContext, rag: EngineResource, config: EvalReportConfig
    ) -> dg.MaterializeResult:
        engine = rag.engine()
        # the eval's model calls (its queries' embeddings) carry this run's id: its tags are their sum
        with run_costs_tagged(context, engine):
            if not config.from_report:  # recording a finished report calls no model
                estimate = eval_estimate(engine)
                with engine_errors("eval_report", {f"estimate_{k}": v for k, v in estimate.items()}):
                    require_paid_approval(context, engine, estimate, config)
            paths = [engine.root / p for p in engine.cfg.evals.golden]
            reports = under_root(engine.root, engine.cfg.evals.reports_dir)
            target = reports / f"{context.run.run_id}.json"
            if config.from_report:
                source = Path(config.from_report)
                report = recorded_report(engine, source, paths)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
                context.log.info("eval: recorded %s (%d queries) without running it again", source, len(report.queries))
            else:
                report = run_eval(
                    engine, paths, generate=EVAL_REPORT_GENERATES, progress=context.log.info, run_id=context.run.run_id
                )
                dump_report(report, target)
            shutil.copyfile(target, reports / "latest.json")
            gen, emb = engine.registry.generation, engine.registry.embedding
            metrics = {k: v for k, v in report.metrics.model_dump(by_alias=True).items() if v is not None}
            context.log.info(
                "eval: %s",
                ", ".join(
                    f"{k} {v:.4f}"
                    for k, v in metrics.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)
                ),
            )
            return dg.MaterializeResult(
                metadata={
                    **{k: (float(v) if isinstance(v, (int, float)) else str(v)) for k, v in metrics.items()},
                    "dagster/row_count": len(report.queries),
                    "report_path": str(target),
                    "recorded_from": config.from_report or "",
                    "default_generation": f"{gen.provider.name}/{gen.model.served_model}",
                    "answers_by": f"{report.generation.provider}/{report.generation.model}",
                    "embedder": f"{emb.provider.name}/{emb.model.served_model} dim {emb.model.dimension}",
                    "golden": dg.MetadataValue.json({"paths": list(report.golden.paths), "hash": report.golden.hash}),
                    "config_hash": config_hash(engine.cfg),
                    "reindex": dg.MetadataValue.json(report.reindex.model_dump() if report.reindex else {}),
                }
            )

    @dg.asset_check(
        asset=eval_report,
        name="eval_gate",
        blocking=True,
        automation_condition=dg.AutomationCondition.eager(),
        description=f"Regression gate against {engine.cfg.evals.baseline} (evals.baseline; ERROR, "
        "blocking): a paired bootstrap per gate metric, cost/tokens/latency within their tolerances, "
        "the BM25 floor, acceptances bound to both reports' hashes. The comparison table has a row "
        "per gated figure and per reason; the result's description gives the reasons.",
    )
    def eval_gate(context: dg.AssetCheckExecutionContext, rag: EngineResource) -> dg.AssetCheckResult:
        engine = rag.engine()
        evals = engine.cfg.evals
        latest = under_root(engine.root, evals.reports_dir) / "latest.json"
        baseline = under_root(engine.root, evals.baseline)
        by = f"dagster {CHECK_NAME}, run {context.run.run_id}"
        try:
            candidate_report, baseline_report = load_report(latest), load_report(baseline)
        except EvalInputError as exc:
            unreadable = GateResult(
                status="incomparable",
                exit_code=EXIT_CODES["incomparable"],
                reasons=(f"unreadable_report: {exc}",),
                metrics={},
                baseline_sha256=None,
                candidate_sha256=None,
                acceptance=None,
                policy=None,
                recorded_by=by,
            )
            return dg.AssetCheckResult(
                passed=False,
                severity=dg.AssetCheckSeverity.ERROR,
                description=f"incomparable: {exc}",
                metadata={
                    "status": "incomparable",
                    "reason": str(exc),
                    "comparison": dg.MetadataValue.table(
                        reason_rows([f"unreadable_report: {exc}"], "incomparable"), schema=GATE_SCHEMA
                    ),
                    "recorded_in": record_gate(engine, unreadable, context.log),
                },
            )
        c_sha, b_sha = report_sha256(latest), report_sha256(baseline)
        acceptance, source = _acceptance_for(under_root(engine.root, evals.acceptances_dir), b_sha, c_sha)
        # who accepted, by the one approval rule (no key here: with principals configured, refused)
        acceptance, refused = bind_acceptance(engine.cfg, engine.root, {}, acceptance)
        result = evaluate_gate(
            candidate_report,
            baseline_report,
            engine.cfg.evals,
            candidate_sha=c_sha,
            baseline_sha=b_sha,
            acceptance=acceptance,
            acceptance_source=source,
            acceptance_error=refused,
        )
        result = result.model_copy(update={"recorded_by": by})
        reasons = "; ".join(result.reasons) or "no regression"
        table = gate_table(result)
        return dg.AssetCheckResult(
            passed=result.status in ("pass", "accepted"),
            severity=dg.AssetCheckSeverity.ERROR,
            description=f"{result.status}: {reasons}"[:2000],
            metadata={
                "status": result.status,
                "comparison": table,
                "regressed_metrics": len(result.regressed_metrics),
                "regressed_figures": sum(r.data["regressed"] is True for r in table.records),
                "reasons": dg.MetadataValue.json(list(result.reasons)),
                "gate": dg.MetadataValue.json(json.loads(json.dumps(result.to_json(), default=str))),
                "recorded_in": record_gate(engine, result, context.log),
            },
        )

    return [eval_report, eval_gate]
