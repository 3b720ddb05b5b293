"""What a Dagster run spent on model calls, as run tags: the Runs list shows tags, not metadata.

Every metered model call is a usage ledger record carrying the run id it was made for
(``rag_engine.providers.ledger``): the ingestion steps pass the run's id, and an eval runs its
queries ``in_run`` the run's id, so the question's embedding deep in retrieval carries it too.
Every ingestion step and ``eval_report`` run inside ``run_costs_tagged(context, engine)``: every
``REFRESH_SECONDS`` while the step runs, and when it ends, however it ends (done, a ``dg.Failure``,
an engine error, a cancel that interrupts the step), the ledger records of its run are summed and
set as the run's tags, so an operator sees each run's cost and tokens in the Runs list and can
filter on them: failed and cancelled runs included, and every run of a backfill (0 calls for a
step that calls no model). Tags are strings; the cost is the sum of the recorded costs, shown
rounded in ``rag/cost_usd`` (``0.1292``, not ``0.129200000004``) and exact in
``rag/cost_usd_exact``, or "unknown" in both when any call of the run has no known cost (a partial
sum would pass for the whole); ``rag/estimated_calls`` counts the calls whose token counts (so
their cost) were estimated, not reported. Called again later in the same run (another asset), the
tags are replaced by the newer,
larger sum.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from decimal import Decimal

import dagster as dg

from rag_engine.engine import Engine
from rag_engine.usage import UsageRecord, shown_cost

log = logging.getLogger(__name__)

COST_TAG = "rag/cost_usd"
EXACT_COST_TAG = "rag/cost_usd_exact"
TOKENS_TAG = "rag/tokens"
CALLS_TAG = "rag/model_calls"
ESTIMATED_TAG = "rag/estimated_calls"
UNKNOWN = "unknown"


def run_cost_tags(records: Iterable[UsageRecord]) -> dict[str, str]:
    """The run tags of these ledger records: calls, input plus output tokens, the cost (shown
    rounded, and exact: plain decimal, no exponent) or "unknown" when any record's cost is unknown,
    and how many calls were priced from estimated token counts."""
    calls, tokens, estimated, cost = 0, 0, 0, Decimal(0)
    unknown = False
    for r in records:
        calls += 1
        tokens += r.input_tokens + r.output_tokens
        estimated += bool(r.estimated)
        if r.cost is None:
            unknown = True
        else:
            cost += r.cost
    return {
        COST_TAG: UNKNOWN if unknown else shown_cost(cost) or "0",
        EXACT_COST_TAG: UNKNOWN if unknown else format(cost.normalize(), "f"),
        TOKENS_TAG: str(tokens),
        CALLS_TAG: str(calls),
        ESTIMATED_TAG: str(estimated),
    }


def tag_run_costs(
    context: dg.AssetExecutionContext | dg.OpExecutionContext, engine: Engine, *, quiet: bool = False
) -> dict[str, str]:
    """Sum the ledger records of this context's run and set them as the run's tags (returned);
    ``quiet``: no line in the run's log (the refresh while a step runs)."""
    run_id = context.run.run_id
    tags = run_cost_tags(engine.ledger.records(run_id=run_id))
    context.instance.add_run_tags(run_id, tags)
    if not quiet:
        context.log.info(
            "run %s so far: %s model calls, %s tokens, cost %s",
            run_id[:8],
            tags[CALLS_TAG],
            tags[TOKENS_TAG],
            tags[COST_TAG] + (f" ({tags[ESTIMATED_TAG]} calls estimated)" if tags[ESTIMATED_TAG] != "0" else ""),
        )
    return tags


REFRESH_SECONDS = 30.0
"""How often the tags of a running step are brought up to its ledger sum (a 40-minute embedding
run shows what it has spent so far, not 0 until it ends)."""


def _refresh(context: dg.AssetExecutionContext | dg.OpExecutionContext, engine: Engine, done: threading.Event) -> None:
    while not done.wait(REFRESH_SECONDS):
        try:
            tag_run_costs(context, engine, quiet=True)
        except Exception as exc:  # noqa: BLE001 - a refresh is a courtesy: the step's end tags the run anyway
            log.warning("run cost tags not refreshed: %s: %s", type(exc).__name__, exc)


_TAGGING: ContextVar[bool] = ContextVar("rag_assets_run_costs_tagging", default=False)


@contextmanager
def run_costs_tagged(context: dg.AssetExecutionContext | dg.OpExecutionContext, engine: Engine) -> Iterator[None]:
    """Tag the run with its ledger sum every ``REFRESH_SECONDS`` while the block runs, and when it
    ends, however it ends: a failed or cancelled run's calls cost as much as a finished run's. A
    tagging error after a failure is logged, never raised over the failure. Inside another such
    block (a step's helper) it adds nothing: the outer one tags."""
    if _TAGGING.get():
        yield
        return
    token = _TAGGING.set(True)
    try:
        with _tagged(context, engine):
            yield
    finally:
        _TAGGING.reset(token)


@contextmanager
def _tagged(context: dg.AssetExecutionContext | dg.OpExecutionContext, engine: Engine) -> Iterator[None]:
    engine.ledger  # noqa: B018 - opened here, not first by the refresher thread
    done = threading.Event()
    refresher = threading.Thread(target=_refresh, args=(context, engine, done), name="run-cost-tags", daemon=True)
    refresher.start()
    try:
        yield
    except BaseException:  # a failure, an engine error, the interrupt of a cancelled run: tag, then re-raise
        done.set()
        refresher.join()
        try:
            tag_run_costs(context, engine)
        except Exception as exc:  # noqa: BLE001 - the step's own error is the one to raise
            log.warning("run cost tags not written after the step failed: %s: %s", type(exc).__name__, exc)
        raise
    done.set()
    refresher.join()
    tag_run_costs(context, engine)
