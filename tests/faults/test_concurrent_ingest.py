"""Round two, M7: two ingests while the corpus changes brought deleted documents back: 10 deleted
documents were served again (active, files gone) until a third run.

Run A reads the corpus; before its chunks step the files are deleted and run B (another engine
over the same store and artifacts, as a second process would be) ingests and withdraws them;
then A goes on. A must not activate what B withdrew, and whatever removal a run overlapped
must hold when it ends.
"""

from __future__ import annotations

from rag_engine.ingest.pipeline import IngestObserver, ingest_pack
from rag_engine.retrieval.query import run_query
from tests.faults.conftest import make_engine
from tests.support.packs import temp_pack


def _doc(i: int) -> str:
    return f"---\ncollection: kb_public\n---\n# Notice {i}\n\n## Body\nThe vorpalite notice {i} about laptops.\n"


def _active_docs(engine, pack: str) -> set[str]:
    rows, _, _ = engine.driver.execute_query(
        "MATCH (c:Chunk {pack: $p, active: true}) RETURN DISTINCT c.doc_id AS d", p=pack
    )
    return {r["d"] for r in rows}


class DeleteThenRunOther(IngestObserver):
    def __init__(self, corpus, names, other):
        self.corpus, self.names, self.other, self.done = corpus, names, other, False

    def step_started(self, pack: str, step: str, total: int, unchanged: int) -> None:
        if step == "chunks" and not self.done:
            self.done = True
            for name in self.names:
                (self.corpus / name).unlink()
            eng, p = self.other
            ingest_pack(eng, p, extract=False)
            assert not {n.removesuffix(".md") for n in self.names} & _active_docs(eng, p.name)


def test_a_run_does_not_bring_back_what_a_concurrent_run_withdrew(base_config, unique, tmp_path, neo4j_driver):
    corpus = tmp_path / "corpus"
    files = {f"note{i}.md": _doc(i) for i in range(6)}
    first, second = make_engine(base_config, tmp_path), make_engine(base_config, tmp_path)
    try:
        pack_a = temp_pack(first, unique, corpus, files)
        pack_b = temp_pack(second, unique, corpus, {})
        ingest_pack(first, pack_a, extract=False)  # every note is live
        for i in range(6):  # a new version of each, so run A has work for every document
            (corpus / f"note{i}.md").write_text(_doc(i) + "\nRevised.\n")
        deleted = ["note1.md", "note3.md", "note4.md"]
        reports = ingest_pack(
            first, pack_a, extract=False, observer=DeleteThenRunOther(corpus, deleted, (second, pack_b))
        )
        gone = {n.removesuffix(".md") for n in deleted}
        assert {k.split("--")[0] for k in reports["chunks"].rejected} == gone
        assert "removed from the corpus while the run was in progress" in " ".join(reports["chunks"].rejected.values())
        assert _active_docs(first, unique) == {"note0", "note2", "note5"}
        result = run_query(first, "vorpalite notice laptops", role="public", generate=False)
        assert not {c.doc_id for c in result.retrieval.candidates} & gone
    finally:
        first.close()
        second.close()


class DeleteAtChunks(IngestObserver):
    """Deletes files once the run is past its opening withdrawal (at the chunks step)."""

    def __init__(self, corpus, names):
        self.corpus, self.names = corpus, names

    def step_started(self, pack: str, step: str, total: int, unchanged: int) -> None:
        if step == "chunks":
            for name in self.names:
                (self.corpus / name).unlink(missing_ok=True)


def test_a_file_removed_while_the_run_is_in_progress_is_withdrawn_when_it_ends(
    base_config, unique, tmp_path, neo4j_driver
):
    """The run had no work for the removed (unchanged) document, so no step check sees it: only
    the withdrawal at the end of the run stops it being served before the next run."""
    corpus = tmp_path / "corpus"
    engine = make_engine(base_config, tmp_path)
    try:
        pack = temp_pack(engine, unique, corpus, {f"note{i}.md": _doc(i) for i in range(3)})
        ingest_pack(engine, pack, extract=False)
        (corpus / "note0.md").write_text(_doc(0) + "\nRevised.\n")  # work for the run: note0 only
        ingest_pack(engine, pack, extract=False, observer=DeleteAtChunks(corpus, ["note2.md"]))
        assert _active_docs(engine, unique) == {"note0", "note1"}
    finally:
        engine.close()
