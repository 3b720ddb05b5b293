"""usage_costs: the usage ledger summarised by provider, model and run (pandas), and quality per
dollar by generation model (rag_engine.ops.quality_per_dollar)."""

from decimal import Decimal
from typing import Any

import dagster as dg

from rag_assets.resources import EngineResource
from rag_engine.ops.quality_per_dollar import ModelRow, by_model
from rag_engine.providers.ledger import ledger_url


@dg.asset(
    group_name="platform",
    kinds={"python", "pandas"},
    owners=["team:rag-platform"],
    tags={"cost": "free"},
    automation_condition=dg.AutomationCondition.on_cron("0 * * * *"),
    description="Model usage and cost per provider/model/run from the append-only ledger; "
    "unknown costs stay visible as a count, never as zero. by_model: quality per dollar by generation "
    "model (eval reports x measured tokens per query x current prices); extraction and index spend apart.",
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
    table = by_model(engine.cfg, engine.root, ledger_url(engine.cfg, engine.env, engine.root))
    meta["by_model"] = dg.MetadataValue.table(
        [_record(r) for r in table.rows], schema=dg.TableSchema(columns=[dg.TableColumn(n, t) for n, t in BY_MODEL])
    )
    for kind, total in table.spend_totals.items():  # extraction and indexing spend stay apart from query spend
        meta[f"{kind}_spend_usd"] = None if total is None else float(total)
    default = next((r for r in table.rows if r.default), None)
    if default is not None:  # the default model's figures as numbers, so they plot across materializations
        meta["default_cost_per_query_usd"] = _float(default.cost_per_query)
        meta["default_quality_per_dollar"] = default.quality_per_dollar
    return dg.MaterializeResult(metadata=meta)


BY_MODEL = (
    ("model", "string"),
    ("ndcg_at_10", "float"),
    ("citation_hit_rate", "float"),
    ("answer_calls", "int"),
    ("cost_per_query_usd", "float"),
    ("quality_per_dollar", "float"),
    ("cost_per_hour_usd", "float"),
    ("note", "string"),
)


def _float(value: Decimal | None) -> float | None:
    return None if value is None else float(value)


def _record(r: ModelRow) -> dg.TableRecord:
    """A row of the by-model table: unknown is null plus a note in words, never 0."""
    return dg.TableRecord(
        {
            "model": r.model + (" (default)" if r.default else ""),
            "ndcg_at_10": r.ndcg_at_10,
            "citation_hit_rate": r.citation_hit_rate,
            "answer_calls": r.answer_calls,
            "cost_per_query_usd": _float(r.cost_per_query),
            "quality_per_dollar": r.quality_per_dollar,
            "cost_per_hour_usd": _float(r.cost_per_hour),
            "note": "; ".join(r.notes),
        }
    )
