"""Item 13: re-ingesting the same corpus is byte-identical in the graph.

The probe: a chunk citing one key in two spellings ("RB-77" and "RB-077" normalize to the same
key) got one REFERENCES edge whose ``raw`` was whichever citation was written last, so 40 edges
flipped between identical runs. Now ``raw`` is the smallest citation text of the edge: the same
whatever order the citations are written or read in, and a forced re-run writes the same edges.
"""

from __future__ import annotations

from rag_engine.ingest.pipeline import ingest_pack
from tests.support.packs import RUNBOOK, temp_pack

# one chunk cites RB-77 twice, spelled two ways; the other order in the second version
CITING = """---
id: POL-901
collection: kb_internal
---
# Device policy

## Lost devices
Follow {first} at once; {second} lists who to call.
"""


def _edges(engine, pack: str) -> list[tuple]:
    rows, _, _ = engine.driver.execute_query(
        "MATCH (s:Chunk {pack: $p, active: true})-[e:REFERENCES]->(t:Chunk) "
        "RETURN s.doc_id AS s, t.doc_id AS t, e.normalized AS n, e.raw AS raw, e.ref_type AS type "
        "ORDER BY s, t, n",
        p=pack,
    )
    return [tuple(r.values()) for r in rows]


def test_reference_edges_do_not_depend_on_write_order(fault_engine, unique, tmp_path):
    corpus = tmp_path / "corpus"
    files = {"policy.md": CITING.format(first="RB-77", second="RB-077"), "runbook.md": RUNBOOK}
    pack = temp_pack(fault_engine, unique, corpus, files)
    ingest_pack(fault_engine, pack, extract=False)
    first = _edges(fault_engine, unique)
    assert [(s, t, raw) for s, t, _, raw, _ in first if s == "policy"] == [("policy", "runbook", "RB-077")]

    # a forced re-run of every step writes exactly the same edges
    ingest_pack(fault_engine, pack, extract=False, skip_unchanged=False)
    assert _edges(fault_engine, unique) == first

    # the citations in the other order (a new version of the document): the same edge text
    (corpus / "policy.md").write_text(CITING.format(first="RB-077", second="RB-77"), encoding="utf-8")
    ingest_pack(fault_engine, pack, extract=False)
    assert _edges(fault_engine, unique) == first
