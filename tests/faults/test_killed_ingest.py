"""Round three, L7: `rag ingest` wrote its step stamps only at the end of a run, so after a kill -9
during graph writes every step of every document ran again.

The kill is an exception no handler catches, raised from the progress observer as graph writes
report their partitions done: nothing after that point of the run executes, as with SIGKILL. The
next run must skip every step the killed one finished, its committed graph writes included.
"""

from __future__ import annotations

import pytest

from rag_engine.ingest.pipeline import IngestObserver, ingest_pack
from tests.faults.conftest import make_engine
from tests.support.packs import temp_pack


class Killed(BaseException):
    """Stands for SIGKILL: no ``except Exception`` of the run sees it."""


class KillDuringGraphWrites(IngestObserver):
    def __init__(self, after: int):
        self.after, self.seen = after, []

    def partition_done(self, pack: str, step: str, key: str, outcome: str) -> None:
        if step == "graph_writes":
            self.seen.append(key)
            if len(self.seen) == self.after:
                raise Killed


def _doc(i: int) -> str:
    return f"---\ncollection: kb_public\n---\n# Note {i}\n\n## Body\nThe quillwort note {i} about printers.\n"


def test_a_run_killed_during_graph_writes_keeps_the_stamps_of_what_it_finished(base_config, unique, tmp_path):
    storage = base_config.storage
    small = storage.model_copy(update={"neo4j": storage.neo4j.model_copy(update={"write_batch_size": 1})})
    engine = make_engine(base_config, tmp_path, storage=small)  # graph writes in groups of <= 4 partitions
    try:
        pack = temp_pack(engine, unique, tmp_path / "corpus", {f"note{i}.md": _doc(i) for i in range(6)})
        killer = KillDuringGraphWrites(after=1)
        with pytest.raises(Killed):
            ingest_pack(engine, pack, extract=False, skip_unchanged=True, observer=killer)
        reports = ingest_pack(engine, pack, extract=False, skip_unchanged=True)
        keys = set(reports["source_documents"].unchanged) | set(reports["source_documents"].done)
        assert len(keys) == 6
        for step in ("source_documents", "chunks", "references", "chunk_index"):
            assert set(reports[step].unchanged) == keys, (step, reports[step].done.keys())
        graph = reports["graph_writes"]
        assert set(killer.seen) <= set(graph.unchanged)  # its group committed and was stamped
        assert set(graph.done) == keys - set(graph.unchanged) and graph.done  # the group the kill cut
        assert not any(r.failed or r.rejected for r in reports.values())
    finally:
        engine.close()
