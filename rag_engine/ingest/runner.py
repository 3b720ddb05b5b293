"""Running one step over the partitions of a run, so one document's failure stays its own.

``run_step`` runs a step partition by partition; ``run_grouped_step`` writes consecutive
partitions in one transaction and falls back to one at a time when a group's write fails. A
document the pack or the store refuses is recorded as rejected, an unexpected error as failed, and
the run goes on; errors that are the same for every partition (config, capability, the store gone)
stop the run at once with the typed error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from rag_engine.engine import Engine
from rag_engine.errors import (
    CapabilityNotSupported,
    ConfigError,
    DocumentError,
    EmbedderMismatch,
    PackError,
    StoreUnavailable,
)
from rag_engine.packs import DomainPack
from rag_engine.store.connection import store_unreachable

log = logging.getLogger(__name__)


@dataclass
class StepReport:
    """What one step did over the partitions of a run."""

    step: str
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    """Unexpected errors of one partition (Neo4j, provider, bug): the others still run."""
    unchanged: list[str] = field(default_factory=list)
    """Partitions skipped by change detection: same content and step code version as their last
    successful run (``ingest_pack(skip_unchanged=True)``)."""
    seconds: float = 0.0

    def total(self, key: str) -> int:
        return sum(int(v.get(key, 0)) for v in self.done.values())


_STOPS_THE_RUN = (ConfigError, CapabilityNotSupported, EmbedderMismatch, StoreUnavailable)
"""Errors that are the same for every partition: the run stops at once with the typed error."""


def _store_gone(step: str, key: str, exc: BaseException) -> StoreUnavailable:
    """The store stopped answering mid-run: every later partition would wait out the driver's
    retries and fail the same way (Neo4j stopped during an ingest of 133 documents: ~40 s and a
    traceback per partition), so the run stops here with one line."""
    return StoreUnavailable(
        f"Neo4j stopped answering during {step} ({key}: {type(exc).__name__}); the run stopped there. "
        "Finished partitions are kept: re-run the ingest when the store is back",
        partition=key,
    )


def _attempt(report: StepReport, step: str, key: str, work: Callable[[], Any]) -> tuple[bool, Any]:
    """Run one partition's work, recording a rejection, skip or failure in ``report``: (ok, result)."""
    try:
        return True, work()
    except (DocumentError, PackError) as exc:  # one document's problem, never the run's
        report.rejected[key] = str(exc)
        log.warning("%s %s rejected: %s", step, key, exc)
    except SkipPartition as exc:
        report.skipped[key] = str(exc)
    except _STOPS_THE_RUN:
        raise  # the same for every partition: stop at once with the typed error
    except Exception as exc:
        gone = store_unreachable(exc)
        if gone is not None:  # every later partition would wait out the driver's retries the same way
            raise _store_gone(step, key, gone) from None
        report.failed[key] = f"{type(exc).__name__}: {exc}"
        log.exception("%s %s failed: %s", step, key, report.failed[key])
    return False, None


def _outcome(report: StepReport, key: str) -> str:
    return next(name for name in ("done", "rejected", "skipped", "failed") if key in getattr(report, name))


Committed = Callable[[StepReport, list[str]], None]
"""``committed(report, keys)``: these partitions' work is committed (their outcomes are in the
report); called before ``on_done`` tells anyone, so `rag ingest` stamps them as they finish."""


def run_step(
    step: str,
    keys: list[str],
    fn: Callable[[str], dict[str, Any]],
    progress: Callable[[str], None] | None = None,
    on_done: Callable[[str, str], None] | None = None,
    committed: Committed | None = None,
) -> StepReport:
    """``on_done(key, outcome)`` after each partition (outcome: done, rejected, skipped, failed)."""
    report = StepReport(step)
    started = time.perf_counter()
    for i, key in enumerate(keys, 1):
        ok, figures = _attempt(report, step, key, partial(fn, key))
        if ok:
            report.done[key] = figures
        if committed:
            committed(report, [key])
        if on_done:
            on_done(key, _outcome(report, key))
        if progress and (i == len(keys) or i % 10 == 0):
            progress(f"{step}: {i}/{len(keys)} partitions")
    report.seconds = round(time.perf_counter() - started, 3)
    return report


@dataclass(frozen=True)
class Grouped:
    """A step split in two so a run can write several partitions in one transaction:
    ``prepare(key)`` does one partition's own work (artifacts, pack rules, embeddings) and returns
    (rows it will write, what to write); ``write(prepared list)`` writes them in one transaction
    and returns each partition's figures. ``prepare`` then ``write`` of one partition is the step."""

    prepare: Callable[[str], tuple[int, Any]]
    write: Callable[[list[Any]], list[Any]]
    """Each partition's figures, or the exception that partition's write refused it with."""

    def write_one(self, prepared: Any) -> dict[str, Any]:
        """One prepared partition written alone: its figures, or its refusal raised."""
        (out,) = self.write([prepared])
        if isinstance(out, Exception):
            raise out
        return dict(out)

    def step(self, engine: Engine, pack: DomainPack, key: str) -> dict[str, Any]:
        """The whole step for one partition (a Dagster partition run, ``run_step``)."""
        return self.write_one(self.prepare(key)[1])


def _raise(exc: Exception) -> None:
    raise exc


def run_grouped_step(
    step: str,
    keys: list[str],
    grouped: Grouped,
    group_rows: int,
    progress: Callable[[str], None] | None = None,
    on_done: Callable[[str, str], None] | None = None,
    committed: Committed | None = None,
) -> StepReport:
    """``run_step`` with the writes of consecutive partitions grouped into one transaction of
    about ``group_rows`` rows (one round trip per query for the group, one commit): fewer round
    trips, the same writes. A partition whose preparation fails is recorded as ``run_step`` does;
    a group whose write fails is written again one partition at a time, so one partition's
    error is still that partition's only."""
    report = StepReport(step)
    started = time.perf_counter()
    finished = 0
    group: list[tuple[str, Any]] = []

    def tell(key: str) -> None:
        nonlocal finished
        finished += 1
        if on_done:
            on_done(key, _outcome(report, key))
        if progress and (finished == len(keys) or finished % 10 == 0):
            progress(f"{step}: {finished}/{len(keys)} partitions")

    def flush() -> None:
        if len(group) > 1:
            try:
                outcomes = grouped.write([p for _, p in group])
                for (key, _), out in zip(group, outcomes, strict=True):
                    if isinstance(out, Exception):  # this partition's own refusal (e.g. KeyConflict)
                        _attempt(report, step, key, partial(_raise, out))
                    else:
                        report.done[key] = out
            except _STOPS_THE_RUN:
                raise
            except Exception as exc:  # noqa: BLE001 - retried one partition at a time below
                gone = store_unreachable(exc)
                if gone is not None:
                    raise _store_gone(step, group[0][0], gone) from None
                log.info("%s: a write of %d partitions failed (%s); one partition at a time", step, len(group), exc)
        for key, prepared in group:
            if not any(key in outcome for outcome in (report.done, report.rejected, report.skipped, report.failed)):
                ok, figures = _attempt(report, step, key, partial(grouped.write_one, prepared))
                if ok:
                    report.done[key] = figures
        if committed:  # the group's transaction (or each partition's) has committed
            committed(report, [key for key, _ in group])
        for key, _ in group:
            tell(key)
        group.clear()

    rows = 0
    for key in keys:
        ok, prepared = _attempt(report, step, key, partial(grouped.prepare, key))
        if not ok:
            tell(key)
            continue
        group.append((key, prepared[1]))
        rows += prepared[0]
        if rows >= group_rows:
            flush()
            rows = 0
    flush()
    report.seconds = round(time.perf_counter() - started, 3)
    return report


class SkipPartition(Exception):
    """An upstream step rejected this partition; nothing to do here."""
