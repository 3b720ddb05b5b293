"""What a backfill spent, as the backfill's tags: the ledger sum over all of its runs.

Each run of a backfill carries its own cost tags (``rag_assets.run_costs``); a multi-partition
backfill (automation's, or an operator's from the UI or ``dg launch``) has several runs, and the
operator wants its total. The ``backfill_costs`` sensor sums the usage ledger records of every run
of each recent finished backfill (its runs are those tagged ``dagster/backfill=<id>``) and sets the
sum as the backfill's tags, shown on the backfill's page: ``rag/backfill_cost_usd`` (rounded),
``rag/backfill_cost_usd_exact``, ``rag/backfill_tokens``, ``rag/backfill_model_calls``,
``rag/backfill_estimated_calls`` and ``rag/backfill_runs``. Same rules as a run's tags: failed and
cancelled runs count, and a run with a call of unknown cost makes the total "unknown".

Only finished backfills are tagged (completed, failed or cancelled): the backfill daemon no longer
rewrites them (a tag written while it works could be overwritten by its next update), and a
backfill's tags are copied to the runs it launches later, where a running total would read as the
run's own. While one runs, its runs' own tags show what it has spent so far. The sensor starts no
run; it needs the ledger only, not the graph store.
"""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg
from dagster._core.execution.backfill import BULK_ACTION_TERMINAL_STATUSES, PartitionBackfill

from rag_assets.resources import EngineResource
from rag_assets.run_costs import run_cost_tags
from rag_engine.engine import Engine

BACKFILL_ID_TAG = "dagster/backfill"
PREFIX = "rag/backfill_"
RUNS_TAG = f"{PREFIX}runs"
RECENT = 50
"""How many of the newest backfills each tick looks at (older ones were tagged when they finished)."""


def backfill_run_ids(instance: dg.DagsterInstance, backfill_id: str) -> list[str]:
    return list(instance.get_run_ids(filters=dg.RunsFilter(tags={BACKFILL_ID_TAG: backfill_id})))


def backfill_cost_tags(engine: Engine, run_ids: Iterable[str]) -> dict[str, str]:
    """The backfill's tags: ``run_cost_tags`` of the ledger records of all these runs, each name
    ``rag/<x>`` as ``rag/backfill_<x>``, and how many runs were summed."""
    ids = list(run_ids)
    records = [r for run_id in ids for r in engine.ledger.records(run_id=run_id)]
    tags = {PREFIX + name.removeprefix("rag/"): value for name, value in run_cost_tags(records).items()}
    return {**tags, RUNS_TAG: str(len(ids))}


def tag_backfill_costs(
    instance: dg.DagsterInstance, engine: Engine, backfill: PartitionBackfill
) -> dict[str, str] | None:
    """Set a finished backfill's cost tags (returned); None when it is not finished or its tags
    already say so."""
    if backfill.status not in BULK_ACTION_TERMINAL_STATUSES:
        return None
    tags = backfill_cost_tags(engine, backfill_run_ids(instance, backfill.backfill_id))
    current = dict(backfill.tags or {})
    if all(current.get(k) == v for k, v in tags.items()):
        return None
    instance.update_backfill(backfill._replace(tags={**current, **tags}))
    return tags


def backfill_costs_sensor() -> dg.SensorDefinition:
    @dg.sensor(
        name="backfill_costs",
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Tags each finished backfill with its total model calls, tokens and cost (the usage "
        "ledger sum over all its runs): rag/backfill_cost_usd and the others on the backfill's page. "
        "Starts no run.",
    )
    def _sensor(context: dg.SensorEvaluationContext, rag: EngineResource) -> dg.SkipReason:
        engine = rag.engine()
        lines = []
        for backfill in context.instance.get_backfills(limit=RECENT):
            tags = tag_backfill_costs(context.instance, engine, backfill)
            if tags is not None:
                lines.append(
                    f"backfill {backfill.backfill_id}: {tags[RUNS_TAG]} runs, {tags[PREFIX + 'model_calls']} model "
                    f"calls, {tags[PREFIX + 'tokens']} tokens, cost {tags[PREFIX + 'cost_usd']} USD"
                )
        return dg.SkipReason("; ".join(lines) if lines else "no finished backfill with new costs")

    return _sensor
