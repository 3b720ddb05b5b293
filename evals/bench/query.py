"""Query-path latency at growing corpus sizes, paired with a raw hybrid query as the control.

For each size the golden questions run through ``retrieve()`` (policy gate, exact references,
fulltext, vector, planner, traversal, fusion, reference expansion) and, interleaved question by
question, through one raw Cypher query doing what neo4j-graphrag's HybridRetriever does: the
vector and fulltext indexes on the same data, with the same query vector and the same escaped
text, each normalised by its max score, merged, top k. The machine's load moves both alike, so
the figure that matters is the paired ratio engine/raw per repeat and how it grows with size.
Where the engine's time over the raw query goes is read off its trace: each step's mean ms, the
part of it in store statements (``store_ms``), and the engine's time in and out of its statements
against 1.2x of the raw query, beside what one trivial statement costs (the round trip's floor).

Synthetic chunks are sampled from the shipped corpora's sentences (seeded), written through the
pipeline's own batched writer under a throwaway pack (collection legal_public), and removed
afterwards. The dataset of one size is built once and reused by every repeat; a size grows the
previous one. The embedder is pinned to the built-in hash embedder (``hash-embed-384``): a
neural embedder would make a 100k build take hours, and the query path's cost does not depend on
what the vectors mean. Its fusion weight is forced to 1.0 so the dense leg runs. The database
must hold no index of another embedder (use an empty one).

    python -m evals.bench.query [--sizes 1000 10000 100000] [--repeat 3] [--json out.json]
                                [--pack NAME --keep] [--no-rerank]

``--pack NAME --keep`` keeps the synthetic chunks for a later run with the same pack name, which
grows them only as far as its sizes need: two versions of the engine can be measured in turn on
one dataset. ``--no-rerank`` measures the engine without its rerank stage: what every other stage
costs over the raw query, the floor under any rerank stage.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import random
import re
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from rag_engine import yaml_safe
from rag_engine.engine import Engine
from rag_engine.errors import ConfigError, EmbedderMismatch
from rag_engine.governance.policy import gate
from rag_engine.graph import writer
from rag_engine.ingest.documents import discover, load_document
from rag_engine.packs import SourceDocument, make_chunk
from rag_engine.retrieval.retriever import retrieve
from rag_engine.store import schema
from rag_engine.store.measurement import chunk_count, drop_pack, trivial_statement_ms
from rag_engine.store.reads import lucene_escape, vector_fetch

_SENTENCE = re.compile(r"(?<=[.;:])\s+")
DOC_CHUNKS = 1000
BENCH_EMBEDDER = "hash-embed-384"
ROLE = "legal_analyst"
WEIGHTS = {"dense": 1.0}
"""The hash embedder's configured dense weight is 0 (the leg would be skipped): force it on."""

RAW_HYBRID = """
CALL () {
  CALL db.index.vector.queryNodes($index, $vector_fetch, $embedding) YIELD node, score
  WHERE node.active AND coalesce(node.eligible, true) AND node.collection IN $collections
  WITH node, score ORDER BY score DESC LIMIT $k
  WITH collect({node: node, score: score}) AS hits, max(score) AS top
  UNWIND hits AS h
  RETURN h.node AS node, h.score / top AS score
  UNION
  CALL db.index.fulltext.queryNodes($fulltext, $q, {limit: $text_fetch}) YIELD node, score
  WHERE node.active AND coalesce(node.eligible, true) AND node.collection IN $collections
  WITH node, score ORDER BY score DESC LIMIT $k
  WITH collect({node: node, score: score}) AS hits, max(score) AS top
  UNWIND hits AS h
  RETURN h.node AS node, h.score / top AS score
}
WITH node, max(score) AS score ORDER BY score DESC LIMIT $k
RETURN node.chunk_id AS chunk_id, node.text AS text, score
"""
"""The control: neo4j-graphrag's hybrid query shape, with the engine's permission filter and
fetch sizes (vector max(5k, 50), fulltext 4k) so both read the same index entries."""


def bench_engine() -> Engine:
    """The configured engine with the hash embedder pinned as the active one."""
    base = Engine.from_path()
    cfg = base.cfg
    pinned = cfg.model_copy(update={"defaults": cfg.defaults.model_copy(update={"embedding_model": BENCH_EMBEDDER})})
    return Engine(pinned, base.root, base.env)


def serve_synthetic(engine: Engine, pack: str) -> None:
    """The query path reads only enabled packs' chunks (``reads.SERVED``): the synthetic pack is
    served as the pack owning its collection, so the engine and the raw query search the same
    chunks (without it every synthetic hit is filtered out and the engine's fetches grow to their
    caps on each question, which measures a store of forbidden matches instead of the query path)."""
    owner = next(p for p in engine.packs.values() if "legal_public" in p.manifest.collections)
    engine.packs.setdefault(pack, owner)


def sentence_pool(engine: Engine) -> list[str]:
    pool: list[str] = []
    for pack in engine.packs.values():
        for ref in discover(pack):
            doc = load_document(pack, ref.partition_key, max_bytes=engine.cfg.max_document_bytes)
            pool += [s.strip() for s in _SENTENCE.split(doc.text) if 40 < len(s.strip()) < 400]
    return pool


def grow(engine: Engine, pack: str, pool: list[str], start: int, stop: int, rng: random.Random) -> float:
    """Add chunks start..stop (in documents of DOC_CHUNKS); returns seconds spent building."""
    t0 = time.perf_counter()
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
    schema.await_indexes(engine.driver, engine.database, seconds=1200)
    return time.perf_counter() - t0


def prepare_store(engine: Engine) -> None:
    """The schema and the active embedder's vector index (SystemExit if another embedder's is there)."""
    schema.ensure_schema(engine.driver, engine.database)
    spec = engine.registry.embedding
    if spec.model.dimension is None:  # config validation requires one on every embedding model
        raise ConfigError(f"embedding model {spec.name!r} has no dimension")
    try:
        schema.ensure_vector_index(engine.driver, engine.database, spec.identity, spec.model.dimension)
    except EmbedderMismatch as exc:
        raise SystemExit(f"the benchmark needs a database without another embedder's index: {exc}") from None


def cleanup(engine: Engine, pack: str) -> None:
    drop_pack(engine.driver, engine.database, pack, batch=5000)


def questions(engine: Engine) -> list[str]:
    out = []
    for path in engine.cfg.evals.golden:
        out += [q["question"] for q in yaml_safe.load_file(engine.root / path)["queries"]]
    return out


def raw_hybrid(engine: Engine, question: str, collections: list[str], index: str) -> list[dict[str, Any]]:
    """The control: embed, escape, one query (the engine's own escaping, so both search the same text)."""
    cfg = engine.cfg.retrieval
    k = cfg.final_k
    vec = engine.embed_texts([question], purpose="query")[0]
    records, _, _ = engine.driver.execute_query(
        RAW_HYBRID,
        index=index,
        fulltext=schema.CHUNK_FULLTEXT,
        embedding=vec,
        q=lucene_escape(question) or '""',
        collections=collections,
        k=k,
        vector_fetch=vector_fetch(cfg.dense_k),
        text_fetch=cfg.lexical_k * 4,
        database_=engine.database,
        routing_="r",
    )
    return [r.data() for r in records]


def _pct(times: list[float], p: float) -> float:
    return float(np.percentile(times, p))


def measure(
    engine: Engine,
    qs: list[str],
    repeat: int,
    stages: dict[str, list[float]] | None = None,
    *,
    rerank: bool | None = None,
    store: dict[str, list[float]] | None = None,
) -> list[dict[str, float]]:
    """Per repeat: engine and raw p50/p95 over all questions, run interleaved (same load); each
    trace step's ms of every engine question added to ``stages`` (where the engine's time goes),
    and the part of it spent in store statements to ``store`` (the step's ``store_ms``; under
    ``"statements"`` every question's total, under ``"statement_count"`` their number).
    ``rerank=False``: the engine without its rerank stage (``retrieve``'s ``rerank``)."""
    collections = list(gate(engine.cfg, ROLE, None).collections)
    meta = schema.current_embedder(engine.driver, engine.database)
    assert meta is not None
    for q in qs[:5]:  # warm caches and the Cypher planner once
        retrieve(engine, q, ROLE, weights=WEIGHTS)
        raw_hybrid(engine, q, collections, meta["index"])
    out = []
    for _ in range(repeat):
        eng_ms: list[float] = []
        raw_ms: list[float] = []
        for q in qs:
            t0 = time.perf_counter()
            result = retrieve(engine, q, ROLE, weights=WEIGHTS, rerank=rerank)
            t1 = time.perf_counter()
            for step in result.trace:
                if stages is not None:
                    stages.setdefault(step["step"], []).append(step["ms"])
                if store is not None and "store_ms" in step:
                    store.setdefault(step["step"], []).append(step["store_ms"])
                if store is not None and "store_ms_total" in step:
                    store.setdefault("statements", []).append(step["store_ms_total"])
                    store.setdefault("statement_count", []).append(step["store_statements"])
            raw_hybrid(engine, q, collections, meta["index"])
            t2 = time.perf_counter()
            eng_ms.append((t1 - t0) * 1000)
            raw_ms.append((t2 - t1) * 1000)
        e50, e95, r50, r95 = _pct(eng_ms, 50), _pct(eng_ms, 95), _pct(raw_ms, 50), _pct(raw_ms, 95)
        out.append(
            {
                "engine_p50": e50,
                "engine_p95": e95,
                "raw_p50": r50,
                "raw_p95": r95,
                "ratio_p50": e50 / r50,
                "ratio_p95": e95 / r95,
                "engine_mean": statistics.mean(eng_ms),
                "raw_mean": statistics.mean(raw_ms),
            }
        )
    return out


def _spread(values: list[float]) -> str:
    return f"{min(values):7.1f} {statistics.median(values):7.1f} {max(values):7.1f}"


def _ratio_spread(values: list[float]) -> str:
    return f"{min(values):5.2f} {statistics.median(values):5.2f} {max(values):5.2f}"


def render_stages(result: dict[str, Any]) -> str:
    """Each trace step's mean ms per question, the part of it in store statements, and its share
    of the engine's mean time over the raw hybrid query's (the lexical and dense legs are the
    part the raw query also does); then the engine's time in and out of its statements, against
    what 1.2x of the raw query leaves and what one trivial statement costs."""
    reps = result["repeats"]
    over = statistics.mean(r["engine_mean"] - r["raw_mean"] for r in reps)
    store = result.get("store", {})
    lines = [
        f"{result['size']} chunks: engine - raw = {over:.1f} ms mean per question",
        "step | mean ms | in store statements | share",
    ]
    for name, ms in result["stages"].items():
        in_store = f"{statistics.mean(store[name]):.2f}" if store.get(name) else "-"
        share = f"{statistics.mean(ms) / over:.0%}" if over > 0 else "-"
        lines.append(f"{name} | {statistics.mean(ms):.2f} | {in_store} | {share}")
    if store.get("statements"):
        engine, raw = statistics.mean(r["engine_mean"] for r in reps), statistics.mean(r["raw_mean"] for r in reps)
        statements = statistics.mean(store["statements"])
        lines.append(
            f"engine {engine:.1f} ms mean: {statements:.1f} in {statistics.mean(store['statement_count']):.1f} store "
            f"statements, {engine - statements:.1f} outside them (Python, session, BEGIN and COMMIT; "
            "Python done while a statement runs counts here); "
            f"1.2x of the raw query's {raw:.1f} ms is {1.2 * raw:.1f}"
        )
    if result.get("trivial_ms"):
        trivial = " / ".join(f"{ms:.2f}" for ms in result["trivial_ms"])
        lines.append(
            f"one trivial statement (RETURN 1) in an open read transaction: {trivial} ms median "
            "(before / after the questions)"
        )
    return "\n".join(lines)


def render(results: list[dict[str, Any]]) -> str:
    head = (
        f"{'chunks':>7} | {'engine p50 ms':^23} | {'engine p95 ms':^23} | {'raw p50 ms':^23} | {'raw p95 ms':^23} "
        f"| {'engine/raw p50':^17} | {'engine/raw p95':^17}"
    )
    spans = [f"{'min':>7} {'median':>7} {'max':>7}"] * 4 + [f"{'min':>5} {'med':>5} {'max':>5}"] * 2
    lines = [head, f"{'':>7} | " + " | ".join(spans)]
    for r in results:
        reps = r["repeats"]
        cols = [_spread([x[key] for x in reps]) for key in ("engine_p50", "engine_p95", "raw_p50", "raw_p95")]
        cols += [_ratio_spread([x[key] for x in reps]) for key in ("ratio_p50", "ratio_p95")]
        lines.append(f"{r['size']:>7} | " + " | ".join(cols))
    if len(results) > 1:
        med = {r["size"]: {k: statistics.median(x[k] for x in r["repeats"]) for k in r["repeats"][0]} for r in results}
        sizes = sorted(med)
        for small, big in itertools.pairwise(sizes):
            a, b = med[small], med[big]
            lines.append(
                f"{small} -> {big}: engine p95 x{b['engine_p95'] / a['engine_p95']:.2f}, "
                f"raw p95 x{b['raw_p95'] / a['raw_p95']:.2f} (medians over repeats)"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the per-repeat figures here")
    ap.add_argument("--pack", help="name of the synthetic pack (default: a fresh one)")
    ap.add_argument("--keep", action="store_true", help="keep the synthetic chunks for a later run")
    ap.add_argument(
        "--no-rerank",
        action="store_true",
        help="the engine without its rerank stage (sentence evidence and the feature reranker): "
        "what every other stage costs over the raw query",
    )
    args = ap.parse_args()

    logging.getLogger("neo4j").setLevel(logging.ERROR)  # the driver's notifications are not results
    engine = bench_engine()
    prepare_store(engine)
    pool, qs = sentence_pool(engine), questions(engine)
    pack = args.pack or f"benchq_{uuid.uuid4().hex[:8]}"
    serve_synthetic(engine, pack)
    results: list[dict[str, Any]] = []
    have = chunk_count(engine.driver, engine.database, pack)
    rng = random.Random(7 + have)  # a resumed build does not repeat the first chunks' sentences
    load = os.getloadavg()
    print(
        f"{len(qs)} golden questions x {args.repeat} repeats per size; load average {load[0]:.2f} {load[1]:.2f}"
        + ("; the engine without its rerank stage" if args.no_rerank else "")
    )
    try:
        for size in sorted(args.sizes):
            seconds = grow(engine, pack, pool, have, size, rng) if size > have else 0.0
            have = max(have, size)
            stages: dict[str, list[float]] = {}
            store: dict[str, list[float]] = {}
            trivial = [trivial_statement_ms(engine.driver, engine.database)]
            reps = measure(engine, qs, args.repeat, stages, rerank=False if args.no_rerank else None, store=store)
            trivial.append(trivial_statement_ms(engine.driver, engine.database))
            result = {
                "size": have,
                "build_s": round(seconds, 1),
                "repeats": reps,
                "load": os.getloadavg()[0],
                "trivial_ms": trivial,
            }
            results.append({**result, "stages": stages, "store": store})
            print(f"{have:>7} synthetic chunks (built in {seconds:.1f}s); load {os.getloadavg()[0]:.2f}", flush=True)
            print(render(results), flush=True)
            print(render_stages(results[-1]), flush=True)
    finally:
        if not args.keep:
            cleanup(engine, pack)
        engine.close()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
