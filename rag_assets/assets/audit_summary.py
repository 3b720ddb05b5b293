"""audit_daily_summary: the audit trail's governance events counted per UTC day.

Blocked collections, generation fallbacks, local-inference degradations, freshness breaches and
refused approvals beside the day's query count, for the last ``DAYS`` days: a table (one row per
day) and the last complete day's counts as plain ints, so they plot across materializations.
Read-only: it needs no approval.
"""

from datetime import UTC, datetime, timedelta

import dagster as dg

from rag_assets.automation import on_cron_or_first
from rag_assets.resources import EngineResource
from rag_engine.governance.audit import SUMMARY_EVENTS, audit_trail

DAYS = 30
"""Days the table covers (today included)."""


@dg.asset(
    group_name="platform",
    kinds={"python"},
    owners=["team:rag-platform"],
    tags={"cost": "free"},
    automation_condition=on_cron_or_first("15 0 * * *"),
    description="Audit trail per UTC day: queries, blocked collections, generation fallbacks, local-inference "
    "degradations, freshness breaches and refused approvals (last 30 days; yesterday's counts plot).",
)
def audit_daily_summary(context: dg.AssetExecutionContext, rag: EngineResource) -> dg.MaterializeResult:
    engine = rag.engine()
    today = datetime.now(UTC).date()
    since = datetime.combine(today - timedelta(days=DAYS - 1), datetime.min.time(), tzinfo=UTC)
    days = audit_trail(engine).daily_counts(since)
    columns = [dg.TableColumn("day", "string"), *(dg.TableColumn(e, "int") for e in SUMMARY_EVENTS)]
    yesterday = next((d for d in days if d["day"] == (today - timedelta(days=1)).isoformat()), None)
    totals = {e: sum(int(d[e]) for d in days) for e in SUMMARY_EVENTS}
    context.log.info("audit trail, last %d days: %s", DAYS, totals)
    return dg.MaterializeResult(
        metadata={
            "per_day": dg.MetadataValue.table(
                [dg.TableRecord(d) for d in reversed(days)], schema=dg.TableSchema(columns=columns)
            ),
            **{f"{e}_yesterday": int(yesterday[e]) if yesterday else 0 for e in SUMMARY_EVENTS},
            **{f"{e}_{DAYS}d": n for e, n in totals.items()},
        }
    )
