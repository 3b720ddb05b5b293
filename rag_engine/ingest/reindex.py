"""Blue/green re-index: move the chunk index to the configured embedder while queries keep
being served from the current one.

    run_reindex(engine) -> ReindexReport        (``rag reindex``)

1. The configured embedder's identity gets its own vector index and chunk property, named by the
   identity (``schema.index_names``) and recorded as ``(:VectorIndex {state: 'building'})``. The
   active index named by ``(:IndexMeta)`` is untouched, so every query reads it as before.
2. Every current chunk lacking the new property is embedded (index side) in batches of the
   model's ``batch_size`` through the embedding cache, and written page by page. A crash (or
   ``stop_after``) keeps what was written: a rerun embeds only the chunks still lacking it.
3. When no current chunk lacks a vector, the switch happens in one write transaction that checks
   that again and repoints ``(:IndexMeta)`` with a new epoch (every process's cached active index
   expires with it, ``store.epochs``); the old index becomes ``retired``. Chunks activated
   meanwhile are caught up first, so nothing is ever served half-indexed.
4. The old index and its chunk property are dropped (``drop_old``; keep it to switch back at
   the cost of the chunks activated since).

The switch (the cut-over) is an approved action unless an eval gate passed for the new
embedder: a ``gate.json`` (``evals.reports_dir`` or ``evals.gate_dirs``) whose ``audit.candidate_embedder``
is the new identity and whose status is ``pass`` or ``accepted`` (e.g. a staging run) clears it.
Otherwise ``approval`` must approve ``reindex_cutover`` bound to ``cutover_plan`` (from, to, the
gate evidence found). A mismatched approval fails at the start; a missing one fails with
``ApprovalRequired`` at the switch, after building, so the old index keeps serving and a rerun with
the approval only switches. Both outcomes are audit records.

The eval report's ``reindex`` record (``evals.runner.reindex_info``) reads the active index's
coverage, so it is true after a switch. Queries of a process still configured with the old
embedder fail with ``EmbedderMismatch`` after the switch: restart it with the new config.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Literal

import neo4j
from pydantic import BaseModel, ConfigDict

from rag_engine.engine import Engine
from rag_engine.errors import ConfigError, EmbedderMismatch
from rag_engine.governance.approvals import REINDEX_CUTOVER, Approval, require
from rag_engine.governance.audit import audit_trail
from rag_engine.ingest.unit_vectors import embed_units
from rag_engine.providers.embedding_cache import embed_batched
from rag_engine.store import reindex as stored
from rag_engine.store import schema
from rag_engine.text.sentences import embedded_passage

log = logging.getLogger(__name__)

PAGE_BATCHES = 8
"""Embedding batches per page of chunks read and written (one write transaction per page)."""
MAX_CATCH_UP = 20
"""Switch attempts: chunks activated while we embedded are caught up before each attempt."""

Phase = Literal["prepare", "embed", "switch", "drop", "done"]
Status = Literal["switched", "already_active", "interrupted", "no_index"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReindexProgress(_Frozen):
    """Handed to the progress callback: after preparing, after each page, before the switch,
    before the drop and at the end."""

    phase: Phase
    done: int
    total: int
    cache_hits: int
    embedded: int
    seconds: float


class ReindexReport(_Frozen):
    status: Status
    """switched: the configured embedder's index is now active; already_active: it was already;
    interrupted: ``stop_after`` stopped it before the switch (a rerun continues); no_index:
    nothing was ever indexed (chunk_index builds the first index)."""
    previous_identity: str | None
    identity: str
    index: str
    property: str
    dimension: int
    resumed: bool
    """A building index from an earlier run was continued."""
    active_chunks: int
    already_present: int
    """Current chunks that had a vector in the new property when this run started."""
    embedded_chunks: int
    """Chunks this run wrote a vector for."""
    cache_hits: int
    embedding_requests: int
    seconds: float
    chunks_per_second: float | None
    dropped: tuple[str, ...] = ()
    """Indexes dropped after the switch (or left over from an earlier one)."""
    retired_kept: tuple[str, ...] = ()
    cutover: Literal["gate_passed", "approved"] | None = None
    """What cleared the switch (None: no switch happened)."""


GATE_PASSED = ("pass", "accepted")


def gate_evidence(engine: Engine, identity: str) -> dict[str, Any] | None:
    """The newest eval gate result that judged ``identity`` as its candidate embedder: path, status
    and the file's sha256; None when no gate result names it."""
    import hashlib
    import json

    found: list[tuple[float, dict[str, Any]]] = []
    for path in engine.cfg.evals.gate_files(engine.root):
        try:
            raw = path.read_bytes()
            data = json.loads(raw)
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or (data.get("audit") or {}).get("candidate_embedder") != identity:
            continue
        shown = str(path.relative_to(engine.root)) if path.is_relative_to(engine.root) else str(path)
        evidence = {"path": shown, "status": data.get("status"), "sha256": hashlib.sha256(raw).hexdigest()}
        found.append((path.stat().st_mtime, evidence))
    return max(found, key=lambda f: f[0])[1] if found else None


def cutover_plan(engine: Engine) -> dict[str, Any] | None:
    """The inputs a ``reindex_cutover`` approval binds (read-only): the active and the configured
    embedder identity and the gate evidence for the latter; None when no switch is due."""
    schema.ensure_schema(engine.driver, engine.database)
    active = schema.current_embedder(engine.driver, engine.database)
    identity = engine.registry.embedding.identity
    if active is None or active["identity"] == identity:
        return None
    return _plan(engine, active["identity"], identity)


def _plan(engine: Engine, current: str, identity: str) -> dict[str, Any]:
    return {"action": REINDEX_CUTOVER, "from": current, "to": identity, "gate": gate_evidence(engine, identity)}


def _switch(engine: Engine, *, old: dict[str, Any], identity: str, index: str, prop: str, dim: int) -> bool:
    """One write transaction: no current chunk lacks the new vector, then IndexMeta moves."""

    def work(tx: neo4j.ManagedTransaction) -> bool:
        # the lock an ingest's activation takes (writer.write_embeddings) before the check: a version
        # embedded for the old index either went live before (and is counted here) or is refused after
        switched = stored.switch(
            tx,
            prop=prop,
            old=old["identity"],
            identity=identity,
            dim=dim,
            index=index,
            property=prop,
            old_index=old["index"],
            old_property=old["property"],
            old_dim=old["dimension"],
        )
        if switched is None:
            return False
        if not switched:
            raise EmbedderMismatch(
                f"the active index changed during the re-index (no longer {old['identity']!r}); run the re-index again"
            )
        return True

    with engine.driver.session(database=engine.database) as session:
        return session.execute_write(work)


def _drop_retired(engine: Engine, keep: set[str]) -> list[str]:
    dropped = []
    for rec in stored.retired(engine.driver, engine.database):
        if rec["identity"] in keep:
            continue
        schema.drop_vector_index(engine.driver, engine.database, rec["index"], rec["property"])
        stored.forget_retired(engine.driver, engine.database, rec["identity"])
        dropped.append(rec["index"])
    return dropped


def run_reindex(
    engine: Engine,
    *,
    progress: Callable[[ReindexProgress], None] | None = None,
    stop_after: int | None = None,
    drop_old: bool = True,
    page_size: int | None = None,
    approval: Approval | None = None,
) -> ReindexReport:
    """Re-index every current chunk with the engine's configured embedder, blue/green.

    ``stop_after``: stop (as a crash would) after this many pages are written, before the
    switch; a rerun continues. ``drop_old`` False keeps the retired index and its vectors.
    ``page_size``: chunks per page (default ``PAGE_BATCHES`` embedding batches). ``approval``:
    the operator's approval of the cut-over, needed unless a gate passed for the new embedder."""
    started = time.perf_counter()
    spec = engine.registry.embedding
    if spec.model.dimension is None:  # the config refuses an embedding model without one
        raise ConfigError(f"embedding model {spec.model.name!r} has no dimension")
    identity, dim = spec.identity, int(spec.model.dimension)
    schema.ensure_schema(engine.driver, engine.database)
    active = schema.current_embedder(engine.driver, engine.database)
    stats = {"cache_hits": 0, "embedded": 0, "requests": 0}

    def report(
        status: Status,
        *,
        index: str,
        prop: str,
        resumed: bool = False,
        active_chunks: int = 0,
        present: int = 0,
        dropped: Iterable[str] = (),
        kept: Iterable[str] = (),
        cutover: Literal["gate_passed", "approved"] | None = None,
    ) -> ReindexReport:
        seconds = time.perf_counter() - started
        return ReindexReport(
            status=status,
            previous_identity=active["identity"] if active else None,
            identity=identity,
            index=index,
            property=prop,
            dimension=dim,
            resumed=resumed,
            active_chunks=active_chunks,
            already_present=present,
            embedded_chunks=stats["embedded"],
            cache_hits=stats["cache_hits"],
            embedding_requests=stats["requests"],
            seconds=round(seconds, 3),
            chunks_per_second=round(stats["embedded"] / seconds, 2) if stats["embedded"] and seconds else None,
            dropped=tuple(dropped),
            retired_kept=tuple(kept),
            cutover=cutover,
        )

    def tell(phase: Phase, done: int, total: int) -> None:
        if progress is not None:
            progress(
                ReindexProgress(
                    phase=phase,
                    done=done,
                    total=total,
                    cache_hits=stats["cache_hits"],
                    embedded=stats["embedded"],
                    seconds=round(time.perf_counter() - started, 3),
                )
            )

    if active is None:
        return report("no_index", index=schema.VECTOR_INDEX, prop=schema.EMBEDDING_PROPERTY)
    if active["identity"] == identity:
        n, present = stored.vector_counts(engine.driver, engine.database, active["property"])
        dropped = _drop_retired(engine, keep=set()) if drop_old else []
        tell("done", present, n)
        return report(
            "already_active",
            index=active["index"],
            prop=active["property"],
            active_chunks=n,
            present=present,
            dropped=dropped,
        )

    # 0. the cut-over: cleared by a passed gate for this identity, else by an approval of this plan;
    # a mismatched approval is refused here, before anything changes
    plan = _plan(engine, active["identity"], identity)
    cleared: Literal["gate_passed", "approved"] | None = None
    if plan["gate"] is not None and plan["gate"]["status"] in GATE_PASSED:
        cleared = "gate_passed"
    elif approval is not None:
        require(approval, REINDEX_CUTOVER, plan, audit=audit_trail(engine))
        cleared = "approved"

    # 1. the new index, named by identity (or the one an earlier run started / a kept retired one)
    prior = stored.index_record(engine.driver, engine.database, identity)
    if prior and prior["dimension"] == dim:
        index, prop = prior["index"], prior["property"]
    else:
        index, prop = schema.index_names(identity)
    stored.mark_building(engine.driver, engine.database, identity=identity, index=index, prop=prop, dim=dim)
    schema.create_vector_index(engine.driver, engine.database, index, prop, dim)
    total, present = stored.vector_counts(engine.driver, engine.database, prop)
    resumed = bool(prior) and present > 0
    log.info(
        "reindex %s -> %s: %d current chunks, %d already in %s", active["identity"], identity, total, present, index
    )
    tell("prepare", present, total)

    # 2. embed what lacks the new vector, page by page; 3. switch when nothing does
    page = page_size or spec.model.batch_size * PAGE_BATCHES
    pages = 0
    done = present
    for _attempt in range(MAX_CATCH_UP):
        while rows := stored.missing_vectors(engine.driver, engine.database, prop, page):
            result = embed_batched(
                [embedded_passage(r["heading"], r["text"]) for r in rows],
                lambda batch: engine.embed_texts(batch, purpose="index", run_id="reindex"),
                identity=identity,
                dimension=dim,
                batch_size=spec.model.batch_size,
                cache=engine.embedding_cache,
            )
            units = (
                embed_units(
                    [(r["heading"], r["text"]) for r in rows],
                    lambda batch: engine.embed_texts(batch, purpose="index", run_id="reindex"),
                    vector_property=prop,
                    identity=identity,
                    dimension=dim,
                    batch_size=spec.model.batch_size,
                    cache=engine.embedding_cache,
                    label="reindex",
                ).props
                if engine.cfg.retrieval.evidence.index_units
                else [None] * len(rows)
            )
            stored.write_vectors(
                engine.driver,
                engine.database,
                prop,
                [
                    {"chunk_id": r["chunk_id"], "embedding": v, "units": u}
                    for r, v, u in zip(rows, result.vectors, units, strict=False)
                ],
            )
            stats["cache_hits"] += result.cache_hits
            stats["embedded"] += len(rows)
            stats["requests"] += result.requests
            done += len(rows)
            pages += 1
            tell("embed", done, max(total, done))
            if stop_after is not None and pages >= stop_after:
                log.warning("reindex stopped after %d pages (stop_after): %s keeps serving", pages, active["index"])
                return report(
                    "interrupted", index=index, prop=prop, resumed=resumed, active_chunks=total, present=present
                )
        schema.await_indexes(engine.driver, engine.database)
        if cleared is None:  # built, not switched: refused (and audited) with the plan's hash to approve
            require(
                None,
                REINDEX_CUTOVER,
                plan,
                audit=audit_trail(engine),
                unchanged=f"the new index {index} is built and complete, queries still read {active['index']}",
            )
        tell("switch", done, max(total, done))
        if _switch(engine, old=active, identity=identity, index=index, prop=prop, dim=dim):
            break
    else:
        raise EmbedderMismatch(
            f"chunks kept being activated during {MAX_CATCH_UP} switch attempts; "
            "run the re-index again when ingestion is quiet"
        )
    log.info("reindex: %s is active (%s on %s)", identity, index, prop)

    # 4. the old index goes, unless kept to switch back
    tell("drop", done, max(total, done))
    dropped = _drop_retired(engine, keep=set()) if drop_old else []
    kept = [] if drop_old else stored.retired_names(engine.driver, engine.database)
    tell("done", done, max(total, done))
    return report(
        "switched",
        index=index,
        prop=prop,
        resumed=resumed,
        active_chunks=total,
        present=present,
        dropped=dropped,
        kept=kept,
        cutover=cleared,
    )


def render_text(report: ReindexReport) -> str:
    """Plain lines for the terminal (the CLI adds colour; ``--json`` prints the model)."""
    head = {
        "switched": f"re-index: SWITCHED to {report.identity}",
        "already_active": f"re-index: {report.identity} is already the active index",
        "interrupted": f"re-index: INTERRUPTED before the switch; {report.previous_identity} keeps serving "
        "(run it again to continue)",
        "no_index": "re-index: no chunk index exists yet (chunk_index builds the first one)",
    }[report.status]
    lines = [
        head,
        f"  from           {report.previous_identity or '-'}",
        f"  to             {report.identity} (dimension {report.dimension})",
        f"  index          {report.index} on chunk property {report.property}",
        f"  current chunks {report.active_chunks} ({report.already_present} already indexed"
        f"{', resumed' if report.resumed else ''})",
        f"  embedded       {report.embedded_chunks} chunks, {report.cache_hits} from the embedding cache, "
        f"{report.embedding_requests} requests, {report.seconds:.1f} s"
        + (f" ({report.chunks_per_second} chunks/s)" if report.chunks_per_second else ""),
    ]
    if report.dropped:
        lines.append(f"  dropped        {', '.join(report.dropped)}")
    if report.retired_kept:
        lines.append(f"  kept (retired) {', '.join(report.retired_kept)}")
    if report.cutover:
        lines.append(f"  cut-over       {report.cutover.replace('_', ' ')}")
    return "\n".join(lines)
