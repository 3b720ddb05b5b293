"""The usage record of one model call: what the ledger stores and what a ``ProviderError`` carries.

Below both the error tree and the ledger, so neither imports the other; it imports nothing of the engine.

``acting_as`` names the principal a block of work runs for: every usage record written inside it
(by ``ModelClient``, however deep in the query path the call is) carries that ``actor``. A context
variable rather than a parameter on every model call, because the calls sit several layers below the
query (expansion, the question's embedding, rerank, generation) and none of those layers has any
other use for the caller's identity. Work handed to a thread pool keeps it only when submitted with
``contextvars.copy_context().run`` (the question's embedding is).

``in_run`` does the same for the run id: a call that names no run id of its own is metered under
the run the block belongs to (an eval's queries: the question's embedding deep in retrieval too), so
a run's ledger records are all its calls. ``tallying`` hands the records written inside a block to
its caller as well (an eval's figures per query, without reading the ledger back).

``on_record`` registers a listener called with every record a client makes in this process (the
query service counts model calls and cost for its metrics with it); a listener that raises is
dropped from that call's notification, never failing the model call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field


class UsageRecord(BaseModel):
    """One model call as the ledger stores it. ``None`` means "not reported" / "unknown", never 0."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int | None = None
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    run_id: str | None = None
    actor: str | None = None
    """The authenticated principal the call was made for (a query's ``actor``); None for work no
    principal asked for (ingestion, scheduled runs) and for a query run without a key."""
    purpose: str
    provider: str
    requested_model: str
    reported_model: str | None = None
    input_tokens: int = Field(0, ge=0)
    cached_input_tokens: int | None = Field(None, ge=0)
    output_tokens: int = Field(0, ge=0)
    reasoning_tokens: int | None = Field(None, ge=0)
    estimated: bool | None = None
    """True: no provider reported the token counts, they were computed (a fixture's characters / 4),
    so the cost priced from them is an estimate. None: not recorded (a record older than the field)."""
    latency_ms: int = Field(0, ge=0)
    status: Literal["ok", "error"] = "ok"
    error_type: str | None = None
    pricing_version: str | None = None
    cost: Decimal | None = None


EVAL_ACTOR = "eval"
"""The actor of an eval's queries and model calls (``evals.runner``): eval traffic is told apart from
users' in the audit trail and the ledger. No principal may take this id (``config.PrincipalConfig``)."""

T = TypeVar("T")

_ACTOR: ContextVar[str | None] = ContextVar("rag_engine_actor", default=None)


def current_actor() -> str | None:
    """The principal the current work runs for (``acting_as``), else None."""
    return _ACTOR.get()


@contextmanager
def _scoped(var: ContextVar[T], value: T) -> Iterator[T]:
    """``var`` set to ``value`` for the block, restored after it."""
    token = var.set(value)
    try:
        yield value
    finally:
        var.reset(token)


def acting_as(actor: str | None) -> AbstractContextManager[str | None]:
    """Run the block for ``actor``: usage records written inside it carry it (None: nobody)."""
    return _scoped(_ACTOR, actor)


_RUN: ContextVar[str | None] = ContextVar("rag_engine_run", default=None)


def current_run() -> str | None:
    """The run the current work belongs to (``in_run``), else None."""
    return _RUN.get()


def in_run(run_id: str | None) -> AbstractContextManager[str | None]:
    """Run the block as part of ``run_id``: usage records written inside it that name no run id of
    their own carry it."""
    return _scoped(_RUN, run_id)


_TALLIES: ContextVar[tuple[list[UsageRecord], ...]] = ContextVar("rag_engine_usage_tallies", default=())


@contextmanager
def tallying() -> Iterator[list[UsageRecord]]:
    """The usage records written inside the block, in order (also those of work it handed to a
    thread with ``contextvars.copy_context().run``); a nested block's records count in both."""
    records: list[UsageRecord] = []
    with _scoped(_TALLIES, (*_TALLIES.get(), records)):
        yield records


def tally(record: UsageRecord) -> None:
    """Hand a written usage record to every ``tallying`` block it was written in."""
    for records in _TALLIES.get():
        records.append(record)


_LISTENERS: list[Callable[[UsageRecord], None]] = []


def on_record(listener: Callable[[UsageRecord], None]) -> None:
    """Call ``listener`` with every usage record made in this process from now on (once per listener)."""
    if listener not in _LISTENERS:
        _LISTENERS.append(listener)


def notify(record: UsageRecord) -> None:
    """Hand one record to the listeners; a listener's failure never reaches the model call."""
    for listener in tuple(_LISTENERS):
        try:
            listener(record)
        except Exception:  # noqa: BLE001 - metrics must not fail a model call
            continue


COST_DIGITS = 6
"""Costs are shown to a person with six significant digits, and never fewer than six decimals (the
micro-dollar): ``0.129200000004`` is ``0.1292``, a query's ``0.0004225`` stays ``0.0004225``. The
exact sum stays in the ledger and beside the shown figure (``*_exact``, ``rag costs --json``)."""


def _rounded(value: Decimal | float | str) -> Decimal:
    exact = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    if exact == 0:
        return Decimal(0)
    places = max(COST_DIGITS, COST_DIGITS - 1 - exact.adjusted())
    return exact.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def shown_cost(value: Decimal | float | str | None) -> str | None:
    """A cost as a person reads it (``COST_DIGITS``), trailing zeros dropped, never an exponent;
    None (unknown) stays None."""
    if value is None:
        return None
    text = format(_rounded(value).normalize(), "f")
    return "0" if text in ("-0", "0") else text


def rounded_cost(value: Decimal | float | str | None) -> float | None:
    """``shown_cost`` as a number, for a UI column of floats."""
    return None if value is None else float(_rounded(value))
