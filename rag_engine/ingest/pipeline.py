"""``ingest_pack``: every step over a pack's document versions, in order, in one process.

The same steps the Dagster assets run, for the CLI, benchmarks and tests of the engine alone;
step stamps shared with the assets decide what is unchanged and skipped.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from rag_engine.engine import Engine
from rag_engine.ingest.code_versions import code_versions
from rag_engine.ingest.documents import discover
from rag_engine.ingest.extraction_step import extraction_step, finish_run, new_budget
from rag_engine.ingest.runner import Grouped, StepReport, run_grouped_step, run_step
from rag_engine.ingest.stamps import STEP_DEPS, RunStamps, read_stamps
from rag_engine.ingest.steps import (
    CHUNKS,
    EXTRACTION,
    REFERENCES,
    SOURCE,
    chunks_grouped,
    claim_order,
    graph_grouped,
    index_grouped,
    references_grouped,
    source_step,
    withdraw_missing_documents,
)
from rag_engine.packs import DomainPack
from rag_engine.store import schema

GROUP_BATCHES = 4
"""A grouped step's transaction holds about this many write batches (``storage.neo4j.write_batch_size``
rows each) of consecutive partitions."""


class IngestObserver:
    """Structured progress of ``ingest_pack`` (the CLI draws bars from it). Every hook is a no-op here."""

    def step_started(self, pack: str, step: str, total: int, unchanged: int) -> None:
        """``total`` partitions, of which ``unchanged`` are skipped by change detection."""

    def partition_done(self, pack: str, step: str, key: str, outcome: str) -> None:
        """One partition finished a step: done, rejected, skipped (rejected upstream) or failed."""

    def embedding(self, pack: str, key: str, progress: Any) -> None:
        """An ``EmbedProgress`` after each embedding batch of one partition."""

    def step_finished(self, pack: str, step: str, report: StepReport) -> None:
        """The step's report, its seconds included."""


_STEP_ARTIFACT = {"source_documents": SOURCE, "chunks": CHUNKS, "references": REFERENCES, "llm_extraction": EXTRACTION}
"""The artifact a later step reads; a skipped step must still have left it."""


def stamp_holds(engine: Engine, pack: DomainPack, key: str, step: str, stamps: dict[str, str], version: str) -> bool:
    """A partition's step is done already: its stamp carries the step's code version and the
    artifact later steps read is on disk (a pack without extraction leaves none: the stamp alone)."""
    artifact = _STEP_ARTIFACT.get(step) if step != "llm_extraction" or pack.entry.extraction else None
    return stamps.get(step) == version and (artifact is None or engine.artifacts.exists(pack.name, key, artifact))


def complete(figures: dict[str, Any]) -> bool:
    """Whether a partition's step report vouches for a stamp (an extraction with failed or
    budget-skipped chunks is not done)."""
    return not (figures.get("failed") or figures.get("skipped"))


def step_stamps(engine: Engine, pack: DomainPack) -> dict[str, str]:
    """The code version each step's stamp must carry: the assets' code versions. graph_writes of
    one version re-derives the reference edges into and out of its document (writer.resolve_references),
    so an added or changed document re-runs its own graph step only, as a Dagster partition does."""
    return dict(code_versions(engine, pack))


def ingest_pack(
    engine: Engine,
    pack: DomainPack,
    keys: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
    run_id: str | None = None,
    extract: bool = True,
    skip_unchanged: bool = False,
    observer: IngestObserver | None = None,
) -> dict[str, StepReport]:
    """Run every step over the given document versions (default: all discovered), in order.

    The same steps the Dagster assets run, for the CLI, benchmarks and tests of the engine alone.
    The schema and the vector index are ensured once for the run, and each step's output is passed
    to the next in memory (``ArtifactStore.remembering``; the artifacts are still written).
    With ``skip_unchanged`` (what `rag ingest` does unless --force), a partition whose current
    version holds a stamp of the step's code version, whose upstream steps were skipped too and
    whose artifact is on disk is not run again (``StepReport.unchanged``). A partition's stamps are
    written as its step's work commits (after each grouped transaction, each extraction; the
    source step's at its end), so a killed run keeps what it finished. A run where nothing changed
    writes nothing.
    """
    # files that are not documents (a link out of the corpus, a doc id another file already is)
    # get a partition too: source_documents records why they are rejected
    found = discover(pack, include_rejected=True)
    keys = keys if keys is not None else [r.partition_key for r in found]
    run_id = run_id or f"local-{uuid.uuid4().hex[:12]}"
    schema.ensure_schema(engine.driver, engine.database)  # once for the run (and the process)
    withdraw_missing_documents(engine, pack, [r.doc_id for r in found if r.problem is None])
    budget = new_budget(engine, pack.name)
    obs = observer or IngestObserver()

    def on_batch(k: str) -> Callable[[Any], None] | None:
        return (lambda ep: obs.embedding(pack.name, k, ep)) if observer else None

    # a Grouped step writes several partitions per transaction (``run_grouped_step``)
    group_rows = GROUP_BATCHES * engine.cfg.storage.neo4j.write_batch_size
    steps: list[tuple[str, Callable[..., dict[str, Any]] | Grouped]] = [
        ("source_documents", source_step),
        ("chunks", chunks_grouped(engine, pack)),
        ("references", references_grouped(engine, pack)),
        ("chunk_index", index_grouped(engine, pack, run_id=run_id, progress=on_batch)),
    ]
    if extract:
        steps.append(("llm_extraction", lambda e, p, k: extraction_step(e, p, k, run_id=run_id, budget=budget)))
    steps.append(("graph_writes", graph_grouped(engine, pack)))
    with engine.artifacts.remembering():  # each step's output reaches the next in memory
        wanted = step_stamps(engine, pack)
        old = read_stamps(engine.driver, engine.database, pack.name) if skip_unchanged else {}
        ran: dict[str, set[str]] = {k: set() for k in keys}
        failed_at: dict[str, str] = {}  # partition -> why: failed or rejected at a step, later steps skip it
        book = RunStamps(engine.driver, engine.database, pack.name, old)
        reports = {}
        for name, fn in steps:

            def unchanged(k: str, name: str = name) -> bool:
                return not (ran[k] & set(STEP_DEPS[name])) and stamp_holds(
                    engine, pack, k, name, old.get(k, {}), wanted[name]
                )

            todo = [k for k in keys if not (skip_unchanged and unchanged(k))]
            blocked = {k: failed_at[k] for k in todo if k in failed_at}  # a later step has nothing to build on
            todo = [k for k in todo if k not in blocked]
            if name == "chunks":
                todo = claim_order(todo)
            obs.step_started(pack.name, name, len(keys), len(keys) - len(todo) - len(blocked))

            def on_done(k: str, outcome: str, name: str = name) -> None:
                obs.partition_done(pack.name, name, k, outcome)

            def committed(report: StepReport, batch: list[str], name: str = name) -> None:
                for k in batch:
                    done = report.done.get(k)
                    if done is not None:  # a partial step drops its stamp: the next run continues it
                        book.step_done(k, name, wanted[name] if complete(done) else None)
                if name != "source_documents":  # files read, nothing written: stamped at its end
                    book.flush()

            if isinstance(fn, Grouped):
                report = run_grouped_step(name, todo, fn, group_rows, progress, on_done=on_done, committed=committed)
            else:
                report = run_step(name, todo, partial(fn, engine, pack), progress, on_done=on_done, committed=committed)
            book.flush()
            reports[name] = report
            for k, why in blocked.items():
                report.skipped[k] = why
                obs.partition_done(pack.name, name, k, "skipped")
            failed_at.update(dict.fromkeys(report.failed, f"failed at {name}; re-run after fixing that"))
            failed_at.update({k: f"rejected at {name}: {why}" for k, why in report.rejected.items()})
            report.unchanged = [k for k in keys if k not in set(todo) and k not in blocked]
            for k in todo:
                ran[k].add(name)
            if name == "llm_extraction" and todo:  # a run that extracted nothing records no run
                finish_run(engine, pack, run_id, budget)
            obs.step_finished(pack.name, name, report)
    # files removed while the run was in progress (another run may have withdrawn them already,
    # before this one wrote them): the corpus as it is now decides what stays current
    now = discover(pack, include_rejected=True)
    withdraw_missing_documents(engine, pack, [r.doc_id for r in now if r.problem is None])
    return reports
