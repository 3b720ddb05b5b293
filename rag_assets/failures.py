"""Engine errors as Dagster failures an operator reads in one line.

An asset that lets a typed engine error escape shows it under ``DagsterExecutionStepExecutionError``
with the engine's stack trace, and a stopped store shows the driver's sixty lines of retries. Here
each becomes ``dg.Failure``: a one-line description saying what happened and what to do, and
metadata with the figures behind it: the step, the partitions of the run (``partitions``), the
store's address and the partition where it stopped answering, the approval's inputs hash and
estimate. Unexpected errors (bugs) are left alone: their traceback is what a developer needs.

A sensor cannot fail a run: the same errors there become a one-line ``dg.SkipReason``
(``skip_reason``), the tick is skipped and the next one tries again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import dagster as dg

from rag_engine.engine import Engine
from rag_engine.errors import ApprovalError, RagError, StoreUnavailable
from rag_engine.store.connection import store_unreachable

APPROVE_HOW = (
    "materialize the asset with run config approved_by, reason and this inputs_hash "
    "(Materialize with config in the UI, or dg launch ... --config-json)"
)


def _scalar(value: Any) -> Any:
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return str(value)


def partitions_shown(keys: Sequence[str]) -> dict[str, Any]:
    """A run's partitions as failure metadata: the first and last key and how many (a range of
    hundreds would not fit a metadata row)."""
    keys = list(keys)
    if not keys:
        return {}
    shown = keys[0] if len(keys) == 1 else f"{keys[0]} ... {keys[-1]}"
    return {"partitions": shown, "partition_count": len(keys)}


def as_failure(step: str, exc: BaseException, context: Mapping[str, Any] | None = None) -> dg.Failure:
    """``exc`` as a one-line ``dg.Failure`` of ``step``; ``context``: figures worth showing beside it
    (the run's partitions, the store's address: ``store_address``)."""
    meta: dict[str, Any] = {"error_type": type(exc).__name__, "step": step}
    meta.update({k: _scalar(v) for k, v in (context or {}).items()})
    gone = store_unreachable(exc)
    if isinstance(exc, ApprovalError):
        first = str(exc).split("; ")[0]
        description = f"{step}: awaiting approval: {first}"
        if exc.inputs_hash:
            meta["inputs_hash"] = exc.inputs_hash
            meta["how_to_approve"] = APPROVE_HOW
    elif isinstance(exc, StoreUnavailable):
        description = f"{step}: the store is unavailable: {exc}".split("\n")[0]
        if exc.uri:
            meta["store_address"] = exc.uri
        if exc.partition:
            meta["stopped_at_partition"] = exc.partition
    elif gone is not None:  # the driver's own error: its message is the retries' address list
        meta["error_type"] = type(gone).__name__
        description = (
            f"{step}: the store is unavailable: Neo4j stopped answering ({type(gone).__name__}); "
            "finished partitions are kept: re-run when it is back"
        )
    else:
        description = f"{step}: {type(exc).__name__}: {exc}".split("\n")[0]
    return dg.Failure(description=description[:1000], metadata=meta, allow_retries=False)


def failure_context(context: dg.AssetExecutionContext, engine: Engine) -> dict[str, Any]:
    """What a step's failure shows beside its line: the run's partitions and the store's address."""
    partitioned = context.has_partition_key or context.has_partition_key_range
    return {
        **partitions_shown(context.partition_keys if partitioned else []),
        "store_address": engine.neo4j_target.shown_uri,
    }


def skip_reason(name: str, exc: BaseException) -> dg.SkipReason | None:
    """A sensor's typed engine error or stopped store as the one line ``as_failure`` would show, as a
    skipped tick (the next tick tries again); None for anything else: a bug keeps its traceback."""
    if not isinstance(exc, RagError) and store_unreachable(exc) is None:
        return None
    return dg.SkipReason(f"{as_failure(name, exc).description}; skipped, the next tick tries again")


@contextmanager
def engine_errors(step: str, context: Mapping[str, Any] | None = None) -> Iterator[None]:
    """Typed engine errors and a stopped store leave the block as one-line ``dg.Failure``s."""
    try:
        yield
    except dg.Failure:
        raise
    except RagError as exc:
        raise as_failure(step, exc, context) from None
    except Exception as exc:
        if store_unreachable(exc) is None:
            raise
        raise as_failure(step, exc, context) from None
