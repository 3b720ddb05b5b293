"""Chunk write throughput into Neo4j: batched UNWIND (the pipeline's path) vs one transaction
per row, measured in one run on the same chunks (the GDPR pack). Prints chunks/s and the ratio.

    python -m evals.bench.ingest [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from rag_engine.documents import discover, load_document
from rag_engine.engine import Engine
from rag_engine.graph import schema, writer


def _cleanup(engine: Engine, pack: str) -> None:
    with engine.driver.session(database=engine.database) as session:  # IN TRANSACTIONS needs an implicit tx
        session.run(
            "MATCH (n) WHERE (n:Chunk OR n:Document) AND n.pack = $pack "
            "CALL (n) { DETACH DELETE n } IN TRANSACTIONS OF 2000 ROWS",
            pack=pack,
        ).consume()
    engine.driver.execute_query(
        "MATCH (v:DocumentVersion) WHERE v.key STARTS WITH $p DETACH DELETE v", p=pack + ":", database_=engine.database
    )
    engine.driver.execute_query(
        "MATCH (k:RefKey) WHERE k.key STARTS WITH $p DETACH DELETE k", p=pack + "|", database_=engine.database
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pack", default="legal_regulatory")
    args = ap.parse_args()

    engine = Engine.from_path()
    pack = engine.pack(args.pack)
    schema.ensure_schema(engine.driver, engine.database)
    docs = [load_document(pack, r.partition_key, max_bytes=engine.cfg.max_document_bytes) for r in discover(pack)]
    rates: dict[str, list[float]] = {"batched": [], "per_row": []}
    total = 0
    for _ in range(args.repeat):
        for mode in ("batched", "per_row"):
            bench_pack = f"bench_{uuid.uuid4().hex[:8]}"
            # distinct doc ids per round so both modes create, not update
            variants = [d.model_copy(update={"pack": bench_pack}) for d in docs]
            chunked = [(d, pack.chunk(d)) for d in variants]
            total = sum(len(c) for _, c in chunked)
            started = time.perf_counter()
            for d, chunks in chunked:
                if mode == "batched":
                    writer.write_document_version(
                        engine.driver,
                        engine.database,
                        pack=bench_pack,
                        doc_id=d.doc_id,
                        version=d.version,
                        title=d.title,
                        collection=d.collection,
                        content_hash=d.version,
                        source_path=d.source_path,
                        chunks=chunks,
                        batch_size=engine.cfg.storage.neo4j.write_batch_size,
                    )
                else:
                    writer.write_document_version(  # the version node alone, then one transaction per chunk
                        engine.driver,
                        engine.database,
                        pack=bench_pack,
                        doc_id=d.doc_id,
                        version=d.version,
                        title=d.title,
                        collection=d.collection,
                        content_hash=d.version,
                        source_path=d.source_path,
                        chunks=[],
                    )
                    writer.write_chunks_per_row(
                        engine.driver, engine.database, pack=bench_pack, key=f"{d.doc_id}--{d.version}", chunks=chunks
                    )
            rates[mode].append(total / (time.perf_counter() - started))
            _cleanup(engine, bench_pack)
    b, p = statistics.median(rates["batched"]), statistics.median(rates["per_row"])
    print(f"chunks per round: {total} ({len(docs)} documents, pack {args.pack}), rounds: {args.repeat}")
    print(f"batched UNWIND : {b:10.0f} chunks/s (median)")
    print(f"per-row writes : {p:10.0f} chunks/s (median)")
    print(f"ratio          : {b / p:10.1f}x")
    engine.close()


if __name__ == "__main__":
    main()
