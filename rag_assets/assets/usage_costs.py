"""usage_costs: the usage ledger summed by purpose, provider and model, and quality per dollar by
generation model (both from rag_engine.ops.quality_per_dollar.by_model).

The summary has no run column: a run's own cost and tokens are its run tags (rag_assets.run_costs),
where the Runs list shows them (and `rag costs --run-id ID`); a row per run here would grow with
every run and bury the spend.
"""

from decimal import Decimal
from typing import Any

import dagster as dg

from rag_assets.automation import on_cron_or_first
from rag_assets.resources import EngineResource
from rag_assets.run_costs import tag_run_costs
from rag_engine.ops.quality_per_dollar import ModelRow, SpendRow, by_model
from rag_engine.providers.ledger import ledger_url
from rag_engine.usage import rounded_cost


@dg.asset(
    group_name="platform",
    kinds={"python"},
    owners=["team:rag-platform"],
    tags={"cost": "free"},
    automation_condition=on_cron_or_first("0 * * * *"),
    description="Model usage and cost per purpose/provider/model from the append-only ledger "
    "(summary table); unknown costs are null plus a count of unpriced calls, never zero. by_model: "
    "quality per dollar by generation model (the fact-stated rate of the answers each model wrote "
    "in the eval reports x measured tokens per query x current prices; estimated costs marked); "
    "extraction and index spend apart. A run's own cost is on its tags (rag/cost_usd).",
)
def usage_costs(context: dg.AssetExecutionContext, rag: EngineResource) -> dg.MaterializeResult:
    engine = rag.engine()
    table = by_model(engine.cfg, engine.root, ledger_url(engine.cfg, engine.env, engine.root))
    known = [s.cost for s in table.spend if s.cost is not None]
    meta: dict[str, Any] = {
        "calls": sum(s.calls for s in table.spend),
        "unknown_cost_calls": sum(s.unknown_cost_calls for s in table.spend),
        "estimated_cost_calls": sum(s.estimated_calls for s in table.spend),
        "known_cost_usd": rounded_cost(sum(known, Decimal(0))),  # shown rounded; exact: `rag costs --json`
        "summary": spend_table(table.spend),
        "by_model": dg.MetadataValue.table(
            [_record(r) for r in table.rows], schema=dg.TableSchema(columns=[dg.TableColumn(n, t) for n, t in BY_MODEL])
        ),
    }
    for kind, total in table.spend_totals.items():  # extraction and indexing spend stay apart from query spend
        meta[f"{kind}_spend_usd"] = rounded_cost(total)
    default = next((r for r in table.rows if r.default), None)
    if default is not None:  # the default model's figures as numbers, so they plot across materializations
        meta["default_cost_per_query_usd"] = _float(default.cost_per_query)
        meta["default_quality_per_dollar"] = default.quality_per_dollar
    tag_run_costs(context, engine)  # it calls no model: 0, like its ledger records
    return dg.MaterializeResult(metadata=meta)


SPEND_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("kind", "string", description="query, extraction, index or other"),
        dg.TableColumn("purpose", "string"),
        dg.TableColumn("provider", "string"),
        dg.TableColumn("model", "string", description="the requested (configured) model"),
        dg.TableColumn("calls", "int"),
        dg.TableColumn("input_tokens", "int"),
        dg.TableColumn("output_tokens", "int"),
        dg.TableColumn(
            "cost_usd", "float", description="sum of the calls with a known cost; null when no call's cost is known"
        ),
        dg.TableColumn("unknown_cost_calls", "int", description="calls without a known cost, not in cost_usd"),
        dg.TableColumn(
            "estimated_calls",
            "int",
            description="calls priced from estimated token counts (no provider reported them): "
            "their cost is an estimate",
        ),
    ]
)


def spend_table(spend: tuple[SpendRow, ...]) -> dg.TableMetadataValue:
    """The ledger's spend, a row per kind, purpose, provider and model: numbers as numbers, an
    unknown cost as null (never 0, never the text "nan")."""
    rows = [
        dg.TableRecord(
            {
                "kind": s.kind,
                "purpose": s.purpose,
                "provider": s.provider,
                "model": s.model,
                "calls": s.calls,
                "input_tokens": s.input_tokens,
                "output_tokens": s.output_tokens,
                "cost_usd": _float(s.cost),
                "unknown_cost_calls": s.unknown_cost_calls,
                "estimated_calls": s.estimated_calls,
            }
        )
        for s in sorted(spend, key=lambda s: (s.kind, s.purpose, s.provider, s.model))
    ]
    return dg.MetadataValue.table(rows, schema=SPEND_SCHEMA)


BY_MODEL = (
    ("model", "string"),
    ("answered_as", "string"),
    ("fact_stated_rate", "float"),
    ("fact_questions", "int"),
    ("answer_calls", "int"),
    ("cost_per_query_usd", "float"),
    ("cost_estimated", "bool"),
    ("quality_per_dollar", "float"),
    ("cost_per_hour_usd", "float"),
    ("priced_by", "string"),
    ("note", "string"),
)


def _float(value: Decimal | None) -> float | None:
    """A cost for a table cell: rounded (``usage.shown_cost``; ``rag costs --json`` has the exact sums)."""
    return rounded_cost(value)


def _record(r: ModelRow) -> dg.TableRecord:
    """A row of the by-model table: unknown is null plus a note in words, never 0."""
    return dg.TableRecord(
        {
            "model": r.model + (" (default)" if r.default else ""),
            "answered_as": ", ".join(r.answered_as),
            "fact_stated_rate": r.fact_stated_rate,
            "fact_questions": r.fact_questions,
            "answer_calls": r.answer_calls,
            "cost_per_query_usd": _float(r.cost_per_query),
            "cost_estimated": r.tokens_estimated,
            "quality_per_dollar": r.quality_per_dollar,
            "cost_per_hour_usd": _float(r.cost_per_hour),
            "priced_by": r.priced_by or "unknown",
            "note": "; ".join(r.notes),
        }
    )
