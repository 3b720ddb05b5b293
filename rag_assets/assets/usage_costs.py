"""usage_costs: the usage ledger summarised by provider, model and run (pandas)."""

from decimal import Decimal
from typing import Any

import dagster as dg

from rag_assets.resources import EngineResource
from rag_engine.config import under_root
from rag_engine.engine import Engine


@dg.asset(
    group_name="platform",
    kinds={"python", "pandas"},
    owners=["team:rag-platform"],
    tags={"cost": "free"},
    automation_condition=dg.AutomationCondition.on_cron("0 * * * *"),
    description="Model usage and cost per provider/model/run from the append-only ledger; "
    "unknown costs stay visible as a count, never as zero.",
)
def usage_costs(context: dg.AssetExecutionContext, rag: EngineResource) -> dg.MaterializeResult:
    engine = rag.engine()
    frame = engine.ledger.summary_frame()
    known: list[Decimal] = [c for c in frame["cost"] if c is not None] if len(frame) else []
    meta: dict[str, Any] = {
        "calls": int(frame["calls"].sum()) if len(frame) else 0,
        "unknown_cost_calls": int(frame["unknown_cost_calls"].sum()) if len(frame) else 0,
        "known_cost_usd": str(sum(known)) if known else "0",
        "known_cost_usd_float": float(sum(known)) if known else 0.0,
        "summary": dg.MetadataValue.md(frame.astype(str).to_markdown(index=False) if len(frame) else "(no usage yet)"),
    }
    quality = _quality_per_dollar(engine, known)
    if quality is not None:
        meta["quality_per_dollar"] = quality
    return dg.MaterializeResult(metadata=meta)


def _quality_per_dollar(engine: Engine, known_costs: list[Decimal]) -> float | None:
    """nDCG@10 of the latest eval report per dollar spent, once eval reports exist."""
    import json

    # the report eval_report wrote last, wherever the config puts reports
    latest = under_root(engine.root, engine.cfg.evals.reports_dir) / "latest.json"
    if not latest.is_file() or not known_costs:
        return None
    total = float(sum(known_costs))
    ndcg = json.loads(latest.read_text()).get("metrics", {}).get("ndcg@10")
    return round(ndcg / total, 4) if ndcg is not None and total > 0 else None
