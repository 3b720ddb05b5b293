"""What a Dagster run spent on model calls, as run tags: the Runs list shows tags, not metadata.

Every metered model call is a usage ledger record carrying the run id it was made for
(``rag_engine.providers.ledger``). An asset that calls models ends with
``tag_run_costs(context, engine)``: the ledger records of its run are summed and set as the
run's tags, so an operator sees each run's cost and tokens in the Runs list and can filter on
them. Tags are strings; the cost is the sum of the recorded costs, shown rounded in
``rag/cost_usd`` (``0.1292``, not ``0.129200000004``) and exact in ``rag/cost_usd_exact``, or
"unknown" in both when any call of the run has no known cost (a partial sum would pass for the
whole). Called again later in the same run (another asset), the tags are replaced by the newer,
larger sum.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

import dagster as dg

from rag_engine.engine import Engine
from rag_engine.usage import UsageRecord, shown_cost

COST_TAG = "rag/cost_usd"
EXACT_COST_TAG = "rag/cost_usd_exact"
TOKENS_TAG = "rag/tokens"
CALLS_TAG = "rag/model_calls"
UNKNOWN = "unknown"


def run_cost_tags(records: Iterable[UsageRecord]) -> dict[str, str]:
    """The run tags of these ledger records: calls, input plus output tokens, and the cost (shown
    rounded, and exact: plain decimal, no exponent) or "unknown" when any record's cost is unknown."""
    calls, tokens, cost = 0, 0, Decimal(0)
    unknown = False
    for r in records:
        calls += 1
        tokens += r.input_tokens + r.output_tokens
        if r.cost is None:
            unknown = True
        else:
            cost += r.cost
    return {
        COST_TAG: UNKNOWN if unknown else shown_cost(cost) or "0",
        EXACT_COST_TAG: UNKNOWN if unknown else format(cost.normalize(), "f"),
        TOKENS_TAG: str(tokens),
        CALLS_TAG: str(calls),
    }


def tag_run_costs(context: dg.AssetExecutionContext | dg.OpExecutionContext, engine: Engine) -> dict[str, str]:
    """Sum the ledger records of this context's run and set them as the run's tags (returned)."""
    run_id = context.run.run_id
    tags = run_cost_tags(engine.ledger.records(run_id=run_id))
    context.instance.add_run_tags(run_id, tags)
    context.log.info(
        "run %s so far: %s model calls, %s tokens, cost %s",
        run_id[:8],
        tags[CALLS_TAG],
        tags[TOKENS_TAG],
        tags[COST_TAG],
    )
    return tags
