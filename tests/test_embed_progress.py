"""The run-level embedding progress lines (rag_engine/ingest/embed_progress.py): chunks done of total
over all partitions, the rate of what was really embedded, an ETA, and a line at least every
``every_s`` seconds even while one batch is in flight."""

from __future__ import annotations

import logging
import time

from rag_engine.ingest.embed_progress import EmbedTracker
from rag_engine.providers.embedding_cache import EmbedProgress


def test_lines_sum_the_partitions_and_tick_while_a_batch_is_in_flight(caplog):
    lines: list[str] = []
    with (
        caplog.at_level(logging.INFO, logger="rag_engine.progress"),
        EmbedTracker("kb/chunk_index", 40, emit=lines.append, every_s=0.2) as tracker,
    ):
        assert lines == ["kb/chunk_index: 0/40 chunks embedded (0 from cache), 0.0 chunks/s, 0s elapsed"]
        tracker.callback("a--0123456789ab")(EmbedProgress(10, 20, 4, 1, 0.1))
        tracker.callback("b--0123456789ab")(EmbedProgress(10, 20, 0, 1, 0.1))
        time.sleep(0.7)  # no batch arrives: the ticker still reports
    assert len(lines) >= 3
    assert lines[-1].startswith("kb/chunk_index: 20/40 chunks embedded (4 from cache), ")
    assert "ETA " in lines[-2]
    assert [r.getMessage() for r in caplog.records if r.name == "rag_engine.progress"] == lines
