"""eval_report and its blocking eval_gate check: the same logic as `python -m evals.gates`.

eval_report runs the golden packs through the query path and stores the report under
var/reports/ (latest.json plus one per run). eval_gate compares it with the committed
evals/reports/BASELINE.json; an acceptance file in evals/acceptances/ whose hashes bind this
baseline and this candidate turns a regression into a pass, anything else fails the check
(ERROR, blocking).
"""

import json
import shutil
from pathlib import Path

import dagster as dg

from evals.gates import evaluate_gate, load_acceptance
from evals.report import dump_report, load_report, report_sha256
from evals.runner import run_eval
from rag_assets.resources import EngineResource
from rag_engine.config import config_hash, under_root
from rag_engine.errors import EvalInputError

def _acceptance_for(folder: Path, baseline_sha: str, candidate_sha: str) -> tuple[dict | None, str | None]:
    for path in sorted(folder.glob("*")):
        if path.suffix.lower() not in {".yaml", ".yml", ".json"}:
            continue
        try:
            data = load_acceptance(path)
        except EvalInputError:
            continue
        if (str(data.get("baseline_sha256", "")).lower() == baseline_sha
                and str(data.get("candidate_sha256", "")).lower() == candidate_sha):
            return data, path.name
    return None, None


def build_eval_assets(pack_keys: list[dg.AssetKey]) -> list:
    @dg.asset(name="eval_report", group_name="platform", deps=pack_keys, kinds={"python"},
              description="Golden query packs through the query path: recall, MRR, nDCG, citations, "
                          "insufficient evidence, latency, cost per query.")
    def eval_report(context: dg.AssetExecutionContext, rag: EngineResource) -> dg.MaterializeResult:
        engine = rag.engine()
        paths = [engine.root / p for p in engine.cfg.evals.golden]
        report = run_eval(engine, paths, progress=context.log.info)
        reports = under_root(engine.root, engine.cfg.evals.reports_dir)
        target = reports / f"{context.run.run_id}.json"
        dump_report(report, target)
        shutil.copyfile(target, reports / "latest.json")
        gen, emb = engine.registry.generation, engine.registry.embedding
        metrics = {k: v for k, v in report.metrics.model_dump(by_alias=True).items() if v is not None}
        return dg.MaterializeResult(metadata={
            **{k: (float(v) if isinstance(v, (int, float)) else str(v)) for k, v in metrics.items()},
            "report_path": str(target),
            "default_generation": f"{gen.provider.name}/{gen.model.served_model}",
            "answers_by": f"{report.generation.provider}/{report.generation.model}",
            "embedder": f"{emb.provider.name}/{emb.model.served_model} dim {emb.model.dimension}",
            "golden": dg.MetadataValue.json({"paths": list(report.golden.paths), "hash": report.golden.hash}),
            "config_hash": config_hash(engine.cfg),
            "reindex": dg.MetadataValue.json(report.reindex.model_dump() if report.reindex else {}),
        })

    @dg.asset_check(asset=eval_report, name="eval_gate", blocking=True,
                    description="Regression gate against evals/reports/BASELINE.json (ERROR, blocking).")
    def eval_gate(rag: EngineResource) -> dg.AssetCheckResult:
        engine = rag.engine()
        evals = engine.cfg.evals
        latest = under_root(engine.root, evals.reports_dir) / "latest.json"
        baseline = under_root(engine.root, evals.baseline)
        try:
            candidate_report, baseline_report = load_report(latest), load_report(baseline)
        except EvalInputError as exc:
            return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.ERROR,
                                       metadata={"status": "incomparable", "reason": str(exc)})
        c_sha, b_sha = report_sha256(latest), report_sha256(baseline)
        acceptance, source = _acceptance_for(under_root(engine.root, evals.acceptances_dir), b_sha, c_sha)
        result = evaluate_gate(candidate_report, baseline_report, engine.cfg.evals, candidate_sha=c_sha,
                               baseline_sha=b_sha, acceptance=acceptance, acceptance_source=source)
        return dg.AssetCheckResult(
            passed=result.status in ("pass", "accepted"), severity=dg.AssetCheckSeverity.ERROR,
            metadata={"status": result.status, "reasons": dg.MetadataValue.json(list(result.reasons)),
                      "gate": dg.MetadataValue.json(json.loads(json.dumps(result.to_json(), default=str)))})

    return [eval_report, eval_gate]
