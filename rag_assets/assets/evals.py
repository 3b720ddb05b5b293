"""eval_report and its blocking eval_gate check: the same logic as `python -m evals.gates`.

eval_report runs the golden packs through the query path and stores the report under
var/reports/ (latest.json plus one per run). With ``from_report`` it records a report that
``python -m evals.runner`` already wrote for this config and golden set instead of running the
queries again (CI: `make eval-gate-dagster` after `make eval`); the file is copied byte for byte,
so an acceptance bound to its hash applies to both gates. eval_gate compares it with the committed
evals/reports/BASELINE.json; an acceptance file in evals/acceptances/ whose hashes bind this
baseline and this candidate turns a regression into a pass, anything else fails the check
(ERROR, blocking).
"""

import json
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg

from evals.code_version import eval_code_version
from evals.gate_acceptance import load_acceptance
from evals.gate_models import GateResult
from evals.gates import evaluate_gate
from evals.report import EvalReport, dump_report, golden_sha256, load_report, report_sha256
from evals.runner import run_eval
from rag_assets.automation import PaidApproval, eval_estimate, eval_step, model_is_free, require_paid_approval
from rag_assets.resources import EngineResource
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


def gate_table(result: GateResult) -> dg.TableMetadataValue:
    """The gate's per-metric comparison, one row per gate metric."""
    rows = [
        dg.TableRecord(
            {
                "metric": name,
                "baseline": round(m.baseline_mean, 4),
                "candidate": round(m.candidate_mean, 4),
                "delta": round(m.mean_delta, 4),
                "ci_low": round(m.ci_low, 4),
                "ci_high": round(m.ci_high, 4),
                "n": m.n,
                "regressed": m.regressed,
            }
        )
        for name, m in result.metrics.items()
    ]
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn("metric", "string"),
            dg.TableColumn("baseline", "float"),
            dg.TableColumn("candidate", "float"),
            dg.TableColumn("delta", "float"),
            dg.TableColumn("ci_low", "float"),
            dg.TableColumn("ci_high", "float"),
            dg.TableColumn("n", "int"),
            dg.TableColumn("regressed", "bool"),
        ]
    )
    return dg.MetadataValue.table(rows, schema=schema)


def build_eval_assets(pack_keys: list[dg.AssetKey], engine: Engine, config_path: str) -> list[dg.AssetsDefinition]:
    gen_free = model_is_free(engine, engine.cfg.defaults.generation_model)

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
        if not config.from_report:  # recording a finished report calls no model
            require_paid_approval(context, engine, eval_estimate(engine), config)
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
            report = run_eval(engine, paths, progress=context.log.info)
            dump_report(report, target)
        shutil.copyfile(target, reports / "latest.json")
        gen, emb = engine.registry.generation, engine.registry.embedding
        metrics = {k: v for k, v in report.metrics.model_dump(by_alias=True).items() if v is not None}
        context.log.info(
            "eval: %s",
            ", ".join(
                f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
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
        description="Regression gate against evals/reports/BASELINE.json (ERROR, blocking): a "
        "paired bootstrap per gate metric (table), the BM25 floor, acceptances bound "
        "to both reports' hashes. The result's description gives the reasons.",
    )
    def eval_gate(rag: EngineResource) -> dg.AssetCheckResult:
        engine = rag.engine()
        evals = engine.cfg.evals
        latest = under_root(engine.root, evals.reports_dir) / "latest.json"
        baseline = under_root(engine.root, evals.baseline)
        try:
            candidate_report, baseline_report = load_report(latest), load_report(baseline)
        except EvalInputError as exc:
            return dg.AssetCheckResult(
                passed=False,
                severity=dg.AssetCheckSeverity.ERROR,
                description=f"incomparable: {exc}",
                metadata={"status": "incomparable", "reason": str(exc)},
            )
        c_sha, b_sha = report_sha256(latest), report_sha256(baseline)
        acceptance, source = _acceptance_for(under_root(engine.root, evals.acceptances_dir), b_sha, c_sha)
        result = evaluate_gate(
            candidate_report,
            baseline_report,
            engine.cfg.evals,
            candidate_sha=c_sha,
            baseline_sha=b_sha,
            acceptance=acceptance,
            acceptance_source=source,
        )
        reasons = "; ".join(result.reasons) or "no regression"
        return dg.AssetCheckResult(
            passed=result.status in ("pass", "accepted"),
            severity=dg.AssetCheckSeverity.ERROR,
            description=f"{result.status}: {reasons}"[:2000],
            metadata={
                "status": result.status,
                "comparison": gate_table(result),
                "regressed_metrics": len(result.regressed_metrics),
                "reasons": dg.MetadataValue.json(list(result.reasons)),
                "gate": dg.MetadataValue.json(json.loads(json.dumps(result.to_json(), default=str))),
            },
        )

    return [eval_report, eval_gate]
