"""ArtifactStore: files always written; within ``remembering()`` later reads come from memory."""

from __future__ import annotations

import json
from pathlib import Path

from rag_engine.store.artifacts import ArtifactStore


def test_remembering_serves_reads_from_memory_and_still_writes_the_file(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    with store.remembering():
        store.write("p", "doc--0123456789ab", "chunks", [{"chunk_id": "a"}])
        path = store.path("p", "doc--0123456789ab", "chunks")
        assert json.loads(path.read_text(encoding="utf-8")) == [{"chunk_id": "a"}]  # for other processes
        path.unlink()  # the next step of this run does not go back to the disk
        assert store.exists("p", "doc--0123456789ab", "chunks")
        assert store.read("p", "doc--0123456789ab", "chunks") == [{"chunk_id": "a"}]
    assert not store.exists("p", "doc--0123456789ab", "chunks")  # outside the run: the disk is the truth


def test_a_file_read_once_in_a_run_is_parsed_once(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    store.write("p", "k--0123456789ab", "source", {"text": "x"})
    with store.remembering():
        first = store.read("p", "k--0123456789ab", "source")
        changed = json.dumps({"text": "changed on disk"})
        store.path("p", "k--0123456789ab", "source").write_text(changed, encoding="utf-8")
        assert store.read("p", "k--0123456789ab", "source") is first
        with store.remembering():  # nested: the outer run's memory stays
            assert store.read("p", "k--0123456789ab", "source") is first
    assert store.read("p", "k--0123456789ab", "source") == {"text": "changed on disk"}
