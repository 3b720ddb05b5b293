"""Reference resolution at scale: incremental (the pipeline's path) vs whole-pack re-derivation
per document (the previous algorithm, kept here only as the in-run control).

A synthetic multi-instrument corpus (default 40 documents x 343 passages = 13,720) where every
passage cites rules of its own instrument and of others, with instrument-scoped keys as a
multi-instrument pack writes them. Both modes write the same documents one by one, as
`graph_writes` does per partition, into their own throwaway pack; the edges they end with are
compared, and the time of each part (chunk writes, citations, resolution) is printed.

    python -m evals.bench.resolution [--docs 40] [--passages 343] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import time
import uuid
from typing import Any

from evals.bench.ingest import cleanup
from rag_engine.engine import Engine
from rag_engine.graph import writer
from rag_engine.packs import ChunkRecord, ReferenceRecord, SourceDocument, make_chunk
from rag_engine.store import schema
from rag_engine.store.measurement import reference_edges

# The previous algorithm: every document's graph write dropped and re-derived the whole pack.
_OLD_DROP = "MATCH (s:Chunk {pack: $pack})-[e:REFERENCES]->(:Chunk) DELETE e"
_OLD_RESOLVE = """
MATCH (s:Chunk {pack: $pack, active: true})-[r:CITES]->(k:RefKey)<-[:ANSWERS_TO]-(t:Chunk {active: true})
WHERE s <> t
MERGE (s)-[e:REFERENCES {normalized: r.normalized}]->(t)
  SET e.source_type = 'deterministic_reference', e.ref_type = r.ref_type, e.raw = r.raw,
      e.resolved = true, e.resolution_version = $resolution_version
"""


def synthetic_corpus(
    docs: int, passages: int, cites: float = 0.5, seed: int = 7
) -> list[tuple[SourceDocument, list[ChunkRecord], list[ReferenceRecord]]]:
    rng = random.Random(seed)
    codes = [f"I{n:02d}" for n in range(docs)]
    out = []
    for code in codes:
        doc = SourceDocument(
            pack="bench",
            doc_id=code.lower(),
            version="v1",
            title=code,
            text=code,
            collection="bench",
            language="en",
            source_path=f"{code}.md",
        )
        chunks, refs = [], []
        for i in range(passages):
            number = f"{1 + i // 50}.{1 + i % 50}"
            # about `cites` citations a passage, two thirds internal, one third to another instrument
            n_cites = int(cites) + (rng.random() < cites - int(cites))
            targets = [code if rng.random() < 2 / 3 else rng.choice(codes) for _ in range(n_cites)]
            cited = [(c, f"{1 + (j := rng.randrange(passages)) // 50}.{1 + j % 50}") for c in targets]
            text = f"Passage {number} of {code}: see " + ", ".join(f"{c} Rule {n}" for c, n in cited)
            chunk = make_chunk(doc, i, number, f"{code} {number}", text, (f"{code.lower()}:{number}", number))
            chunks.append(chunk)
            refs += [
                ReferenceRecord(
                    source_chunk_id=chunk.chunk_id,
                    ref_type="rule",
                    raw=f"{c} Rule {n}",
                    normalized=f"{c.lower()}:{n}",
                    start=0,
                    end=1,
                )
                for c, n in cited
            ]
        out.append((doc, chunks, refs))
    return out


def _run(
    engine: Engine, corpus: list[tuple[SourceDocument, list[ChunkRecord], list[ReferenceRecord]]], mode: str
) -> dict[str, Any]:
    pack = f"bench_{mode}_{uuid.uuid4().hex[:6]}"
    drv, db = engine.driver, engine.database
    times = {"chunks": 0.0, "citations": 0.0, "resolution": 0.0}
    try:
        for doc, chunks, refs in corpus:
            doc = doc.model_copy(update={"pack": pack})
            chunks = [c.model_copy(update={"chunk_id": c.chunk_id.replace("bench:", f"{pack}:", 1)}) for c in chunks]
            refs = [
                r.model_copy(update={"source_chunk_id": r.source_chunk_id.replace("bench:", f"{pack}:", 1)})
                for r in refs
            ]
            key = f"{doc.doc_id}--{doc.version}"
            started = time.perf_counter()
            writer.write_document_version(
                drv,
                db,
                pack=pack,
                doc_id=doc.doc_id,
                version=doc.version,
                title=doc.title,
                collection=doc.collection,
                content_hash="x",
                source_path=doc.source_path,
                chunks=chunks,
            )
            writer.activate_version(drv, db, pack=pack, doc_id=doc.doc_id, version=doc.version)
            times["chunks"] += time.perf_counter() - started
            started = time.perf_counter()
            writer.write_citations(drv, db, pack=pack, key=key, refs=refs)
            times["citations"] += time.perf_counter() - started
            started = time.perf_counter()
            if mode == "incremental":
                writer.resolve_references(drv, db, pack=pack, key=key, doc_id=doc.doc_id, resolution_version="1")
            else:
                with drv.session(database=db) as session:
                    session.execute_write(
                        lambda tx: (
                            tx.run(_OLD_DROP, pack=pack).consume(),
                            tx.run(_OLD_RESOLVE, pack=pack, resolution_version="1").consume(),
                        )
                    )
            times["resolution"] += time.perf_counter() - started
        edges = reference_edges(drv, db, pack)
        return {**{k: round(v, 2) for k, v in times.items()}, "edges": edges["n"]}
    finally:
        cleanup(engine, pack)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m evals.bench.resolution",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--docs", type=int, default=40)
    ap.add_argument("--passages", type=int, default=343)
    ap.add_argument("--cites", type=float, default=0.5, help="mean citations per passage")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    engine = Engine.from_path()
    schema.ensure_schema(engine.driver, engine.database)
    corpus = synthetic_corpus(args.docs, args.passages, args.cites)
    results = {mode: _run(engine, corpus, mode) for mode in ("incremental", "whole_pack")}
    engine.close()
    for r in results.values():
        total = r["chunks"] + r["citations"] + r["resolution"]
        r["total"] = round(total, 2)
        r["resolution_share"] = round(r["resolution"] / total, 3) if total else 0.0
    summary = {
        "documents": args.docs,
        "passages": args.docs * args.passages,
        **results,
        "same_edges": results["incremental"]["edges"] == results["whole_pack"]["edges"],
        "speedup_resolution": round(
            results["whole_pack"]["resolution"] / max(results["incremental"]["resolution"], 1e-9), 1
        ),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{summary['passages']} passages in {args.docs} documents, one graph write per document")
        print(
            f"{'mode':<12} {'chunks s':>9} {'cites s':>8} {'resolve s':>10} {'total s':>8} {'resolve share':>14} edges"
        )
        for mode, r in results.items():
            print(
                f"{mode:<12} {r['chunks']:>9} {r['citations']:>8} {r['resolution']:>10} {r['total']:>8} "
                f"{r['resolution_share']:>14.1%} {r['edges']}"
            )
        print(f"resolution speed-up {summary['speedup_resolution']}x; same edges: {summary['same_edges']}")
    return 0 if summary["same_edges"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
