"""Progress of `rag ingest` on stderr: one bar per step (documents, counts, ETA) and one for the
embedding batches of the document being indexed. Quiet under --json or when stderr is no TTY;
then one plain line per finished step (stderr), which logs and CI keep."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from rag_engine.ingest.pipeline import IngestObserver
from rag_engine.ingest.runner import StepReport


class RichIngestProgress(IngestObserver):
    def __init__(self, console: Console, live: bool):
        self.console = console
        self.live = live
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
            disable=not live,
        )
        self._steps: dict[tuple[str, str], TaskID] = {}
        self._embed: TaskID | None = None

    def __enter__(self) -> RichIngestProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def step_started(self, pack: str, step: str, total: int, unchanged: int) -> None:
        note = f"{unchanged} unchanged" if unchanged else ""
        self._steps[(pack, step)] = self.progress.add_task(
            escape(f"[{pack}] {step}"), total=total - unchanged or None, note=note, completed=0
        )
        if total == unchanged:
            self.progress.update(self._steps[(pack, step)], total=1, completed=1)

    def partition_done(self, pack: str, step: str, key: str, outcome: str) -> None:
        self.progress.advance(self._steps[(pack, step)])

    def embedding(self, pack: str, key: str, progress: Any) -> None:
        if not self.live:
            return
        if self._embed is None:
            self._embed = self.progress.add_task("  embedding", total=progress.total, note="", completed=0)
        self.progress.update(
            self._embed,
            total=progress.total,
            completed=progress.done,
            note=f"{progress.cache_hits} cached, {progress.requests} requests ({key[:24]})",
            visible=progress.done < progress.total,
        )

    def step_finished(self, pack: str, step: str, report: StepReport) -> None:
        if self._embed is not None:
            self.progress.remove_task(self._embed)
            self._embed = None
        if not self.live:  # one line per step, for logs
            self.console.print(
                f"[{pack}] {step}: {len(report.done)} done, {len(report.unchanged)} unchanged, "
                f"{len(report.rejected)} rejected, {len(report.failed)} failed, {report.seconds:.1f}s"
                + _unit_cost(report),
                markup=False,
            )


def _unit_cost(report: StepReport) -> str:
    """The sentence-evidence share of a chunk_index step: unit vectors and their embedding seconds."""
    units = report.total("unit_vectors")
    if not units:
        return ""
    seconds = sum(float(v.get("unit_embed_seconds", 0.0)) for v in report.done.values())
    chunks = sum(float(v.get("embed_seconds", 0.0)) for v in report.done.values())
    return f" ({report.total('embedded')} chunk vectors {chunks:.1f}s, {units} unit vectors {seconds:.1f}s)"
