"""Round two, M9: the fulltext leg starved a role that reads a small share of the store.

``query "Authorised Person Regulator" --role public`` got 0 candidates although 60 public chunks
matched: the ``lexical_k x 4`` fetch was used up by chunks the role cannot read, and unlike the
vector leg it never grew.
"""

from __future__ import annotations

from rag_engine.engine import Engine
from rag_engine.retrieval.query import run_query
from rag_engine.store import reads
from rag_engine.store.session import read_transaction
from tests.faults.conftest import make_engine
from tests.support.packs import temp_pack

TERM = "quexotrombine"


def _internal(i: int) -> str:
    body = "\n\n".join(f"## Part {j}\n{TERM} {TERM} {TERM}." for j in range(10))
    return f"---\ncollection: kb_internal\n---\n# Internal {i}\n\n{body}\n"


PUBLIC = (
    "---\ncollection: kb_public\n---\n# Public notice\n\n"
    f"## Visitors\nVisitors sign in at the front desk, and a {TERM} badge is handed out for the day "
    "to every guest who waits in the lobby until their host arrives to collect them.\n"
)


def test_the_fulltext_leg_finds_a_small_permitted_share_behind_many_forbidden_matches(
    base_config, unique, tmp_path, neo4j_driver
):
    cfg = base_config.model_copy(update={"retrieval": base_config.retrieval.model_copy(update={"lexical_k": 5})})
    engine = make_engine(cfg, tmp_path)
    try:
        files = {f"internal{i}.md": _internal(i) for i in range(4)}  # 40 internal chunks outrank it
        pack = temp_pack(engine, unique, tmp_path / "corpus", {**files, "public.md": PUBLIC})
        from rag_engine.ingest.pipeline import ingest_pack

        ingest_pack(engine, pack, extract=False)
        with read_transaction(engine.driver, engine.database, packs=[pack.name]) as rx:
            hits = reads.fulltext(rx, TERM, ("kb_public",), 5)
            lexical, _ = reads.legs(
                rx, TERM, None, ("kb_public",), lexical_k=5, dense_k=5, identity=engine.embedder_identity
            )
            internal = reads.fulltext(rx, TERM, ("kb_internal",), 5)
        assert [h["doc_id"] for h in hits] == ["public"]
        assert [h["doc_id"] for h in lexical] == ["public"]
        assert len(internal) == 5 and {h["doc_id"] for h in internal} <= {f"internal{i}" for i in range(4)}
        served = Engine(engine.cfg, engine.root, engine.env, packs=[pack])  # only enabled packs are served
        try:
            result = run_query(served, f"{TERM} badge", role="public", generate=False)
        finally:
            served.close()
        sources = {s for c in result.retrieval.candidates if c.doc_id == "public" for s in c.sources}
        assert "lexical" in sources, [(c.doc_id, c.sources) for c in result.retrieval.candidates]
    finally:
        engine.close()
