"""Query-path latency at 10k and 100k chunks: p50/p95 of retrieve() (policy gate, exact references,
fulltext, vector, planner, traversal, fusion, reference expansion), measured in one run.

Synthetic chunks are sampled from the shipped corpora's sentences (seeded), written through the
pipeline's own batched writer under a throwaway pack, embedded with the active embedder, and
removed afterwards. The golden questions are the query workload.

    python -m evals.bench.query [--sizes 10000 100000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import time
import uuid

import numpy as np

from rag_engine import yaml_safe
from rag_engine.documents import discover, load_document
from rag_engine.engine import Engine
from rag_engine.errors import ConfigError
from rag_engine.graph import schema, writer
from rag_engine.packs import SourceDocument, make_chunk
from rag_engine.retrieval.retriever import retrieve

_SENTENCE = re.compile(r"(?<=[.;:])\s+")
DOC_CHUNKS = 1000


def sentence_pool(engine: Engine) -> list[str]:
    pool: list[str] = []
    for pack in engine.packs.values():
        for ref in discover(pack):
            doc = load_document(pack, ref.partition_key, max_bytes=engine.cfg.max_document_bytes)
            pool += [s.strip() for s in _SENTENCE.split(doc.text) if 40 < len(s.strip()) < 400]
    return pool


def grow(engine: Engine, pack: str, pool: list[str], start: int, stop: int, rng: random.Random) -> float:
    """Add chunks start..stop (in documents of DOC_CHUNKS); returns seconds spent writing."""
    spent = 0.0
    for first in range(start, stop, DOC_CHUNKS):
        doc = SourceDocument(
            pack=pack,
            doc_id=f"bench-{first // DOC_CHUNKS:05d}",
            version="v1",
            title="bench",
            text="",
            collection="legal_public",
            language="en",
            source_path="synthetic",
        )
        chunks = [
            make_chunk(doc, i, f"c{first + i}", f"Synthetic {first + i}", " ".join(rng.sample(pool, rng.randint(2, 4))))
            for i in range(min(DOC_CHUNKS, stop - first))
        ]
        vectors = engine.embed_texts([f"{c.heading}\n{c.text}" for c in chunks], purpose="bench")
        t0 = time.perf_counter()
        writer.write_document_version(
            engine.driver,
            engine.database,
            pack=pack,
            doc_id=doc.doc_id,
            version="v1",
            title="bench",
            collection="legal_public",
            content_hash="bench",
            source_path="synthetic",
            chunks=chunks,
            batch_size=1000,
        )
        writer.write_embeddings(
            engine.driver,
            engine.database,
            identity=engine.embedder_identity,
            rows=[{"chunk_id": c.chunk_id, "embedding": v} for c, v in zip(chunks, vectors, strict=False)],
            batch_size=1000,
        )
        writer.activate_version(engine.driver, engine.database, pack=pack, doc_id=doc.doc_id, version="v1")
        spent += time.perf_counter() - t0
    with engine.driver.session(database=engine.database) as s:
        s.run("CALL db.awaitIndexes(1200)").consume()
    return spent


def cleanup(engine: Engine, pack: str) -> None:
    with engine.driver.session(database=engine.database) as s:
        s.run(
            "MATCH (n) WHERE (n:Chunk OR n:Document) AND n.pack = $p "
            "CALL (n) { DETACH DELETE n } IN TRANSACTIONS OF 5000 ROWS",
            p=pack,
        ).consume()
        s.run("MATCH (v:DocumentVersion) WHERE v.key STARTS WITH $p DETACH DELETE v", p=pack + ":").consume()


def questions(engine: Engine) -> list[str]:
    out = []
    for path in engine.cfg.evals.golden:
        out += [q["question"] for q in yaml_safe.load_file(engine.root / path)["queries"]]
    return out


def measure(engine: Engine, qs: list[str], repeat: int) -> dict[str, float]:
    for q in qs[:5]:  # warm caches and the query planner once
        retrieve(engine, q, "legal_analyst")
    times = []
    for _ in range(repeat):
        for q in qs:
            t0 = time.perf_counter()
            retrieve(engine, q, "legal_analyst")
            times.append((time.perf_counter() - t0) * 1000)
    return {
        "p50": float(np.percentile(times, 50)),
        "p95": float(np.percentile(times, 95)),
        "mean": statistics.fmean(times),
        "n": len(times),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    engine = Engine.from_path()
    schema.ensure_schema(engine.driver, engine.database)
    spec = engine.registry.embedding
    dimension = spec.model.dimension
    if dimension is None:  # config validation requires one on every embedding model
        raise ConfigError(f"embedding model {spec.name!r} has no dimension")
    schema.ensure_vector_index(engine.driver, engine.database, spec.identity, dimension)
    pool, qs = sentence_pool(engine), questions(engine)
    pack = f"benchq_{uuid.uuid4().hex[:8]}"
    rng = random.Random(7)
    rows = []
    have = 0
    try:
        for size in sorted(args.sizes):
            seconds = grow(engine, pack, pool, have, size, rng)
            have = size
            stats = measure(engine, qs, args.repeat)
            rows.append((size, stats, seconds))
            print(
                f"{size:>7} synthetic chunks (+ corpus): p50 {stats['p50']:7.1f} ms  p95 {stats['p95']:7.1f} ms  "
                f"mean {stats['mean']:7.1f} ms  over {stats['n']} queries   (write {seconds:.1f}s)",
                flush=True,
            )
    finally:
        cleanup(engine, pack)
        engine.close()
    if len(rows) > 1:
        (s0, a, _), (s1, b, _) = rows[0], rows[-1]
        print(f"{s1 // s0}x more chunks -> p50 x{b['p50'] / a['p50']:.2f}, p95 x{b['p95'] / a['p95']:.2f}")


if __name__ == "__main__":
    main()
