"""Ingest throughput, per pack, in one run: the full pipeline vs the raw batched writes.

For each pack (default: GDPR, KB, ADGM) and round, on fresh pack names so every write creates:

- ``raw``: the chunks already parsed and their vectors already computed, written with the
  pipeline's batched writers (``write_document_version`` then ``write_embeddings``), nothing else;
- ``raw_chunks``: the chunk writes alone (the denominator of the first measurements);
- ``pipeline``: ``ingest_pack(extract=False)`` end to end: discovery, every step, artifacts,
  reference resolution, activation, stamps.

The embedder is pinned to the local hash embedder, so the numbers measure this pipeline, not a
neural model: the database must have no vector index or the hash embedder's (the bench drops the
one it created). Artifacts go to a temporary directory. ``--per-row`` adds the one-transaction-per-
chunk write for comparison with batched UNWIND.

``--scale N`` checks that ingest stays linear as the store grows: N copies of the GDPR pack, each
under its own pack name (so its own chunk ids, documents and reference keys, as N instruments of a
real corpus are), are ingested into one store one after another, 605 chunks each (165 copies is
about 100k chunks). It reports the pipeline's rate per tenth of the copies, so a slowdown with the
store's size shows as a falling rate, and a paired round of raw writes vs pipeline on one fresh
copy, first on the empty store and again at full size. (Copying the corpus inside one pack is not a scale test: the
copies would share their citation keys, so references grow with the copies squared.)

    python -m evals.bench.ingest [--repeat 3] [--packs legal_regulatory,company_x_kb,adgm_rulebooks]
    python -m evals.bench.ingest --packs '' --scale 165
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from rag_engine.engine import Engine
from rag_engine.graph import writer
from rag_engine.ingest.documents import discover, load_document
from rag_engine.ingest.pipeline import ingest_pack
from rag_engine.packs import DomainPack
from rag_engine.store import schema
from rag_engine.store.artifacts import ArtifactStore
from rag_engine.store.measurement import drop_pack

HASH_EMBEDDER = "hash-embed-384"
PACKS = "legal_regulatory,company_x_kb,adgm_rulebooks"


def bench_engine(artifacts_dir: Path) -> Engine:
    """The configured engine with the local hash embedder pinned and artifacts in ``artifacts_dir``."""
    base = Engine.from_path()
    cfg = base.cfg.model_copy(
        update={"defaults": base.cfg.defaults.model_copy(update={"embedding_model": HASH_EMBEDDER})}
    )
    engine = Engine(cfg, base.root, base.env)
    engine.__dict__["artifacts"] = ArtifactStore(artifacts_dir)
    return engine


def renamed(pack: DomainPack, name: str) -> DomainPack:
    """The same pack under another name (so its documents, chunk ids and keys are new)."""
    out = copy.copy(pack)
    out.entry = pack.entry.model_copy(update={"name": name})
    return out


def cleanup(engine: Engine, pack: str) -> None:
    drop_pack(engine.driver, engine.database, pack)


def raw_write(engine: Engine, pack: DomainPack, *, vectors: bool, per_row: bool = False) -> int:
    """Write every document's chunks (and vectors) with no pipeline around it; return the chunk count."""
    docs = [load_document(pack, r.partition_key, max_bytes=engine.cfg.max_document_bytes) for r in discover(pack)]
    chunked = [(d, pack.chunk(d)) for d in docs]
    embedded = [
        engine.embed_texts([f"{c.heading}\n{c.text}" for c in chunks], purpose="index") for _, chunks in chunked
    ]
    prop = schema.ensure_vector_index(
        engine.driver, engine.database, engine.embedder_identity, engine.registry.embedding.model.dimension or 0
    )
    batch = engine.cfg.storage.neo4j.write_batch_size
    started = time.perf_counter()
    for (d, chunks), vecs in zip(chunked, embedded, strict=True):
        writer.write_document_version(
            engine.driver,
            engine.database,
            pack=pack.name,
            doc_id=d.doc_id,
            version=d.version,
            title=d.title,
            collection=d.collection,
            content_hash=d.version,
            source_path=d.source_path,
            chunks=[] if per_row else chunks,
            batch_size=batch,
        )
        if per_row:
            writer.write_chunks_per_row(
                engine.driver, engine.database, pack=pack.name, key=f"{d.doc_id}--{d.version}", chunks=chunks
            )
        if vectors:
            writer.write_embeddings(
                engine.driver,
                engine.database,
                identity=engine.embedder_identity,
                rows=[{"chunk_id": c.chunk_id, "embedding": v} for c, v in zip(chunks, vecs, strict=True)],
                batch_size=batch,
                property=prop,
            )
    seconds = time.perf_counter() - started
    return int(sum(len(c) for _, c in chunked) / seconds)


def pipeline(engine: Engine, pack: DomainPack) -> tuple[int, int, dict[str, float]]:
    """(chunks/s, chunks, seconds per step) of ``ingest_pack`` without model calls."""
    started = time.perf_counter()
    reports = ingest_pack(engine, pack, extract=False)
    seconds = time.perf_counter() - started
    failed = {k: v for r in reports.values() for k, v in r.failed.items()}
    if failed:
        raise SystemExit(f"pipeline failed on {pack.name}: {failed}")
    chunks = reports["chunks"].total("chunks")
    return int(chunks / seconds), chunks, {name: r.seconds for name, r in reports.items()}


def run_packs(engine: Engine, names: list[str], rounds: int, per_row: bool) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        pack = engine.pack(name)
        rates: dict[str, list[int]] = {"raw": [], "raw_chunks": [], "pipeline": [], "per_row": []}
        steps: dict[str, list[float]] = {}
        chunks = 0
        for _ in range(rounds):
            modes = ["raw", "raw_chunks", "pipeline"] + (["per_row"] if per_row else [])
            for mode in modes:
                bench = renamed(pack, f"bench_{uuid.uuid4().hex[:8]}")
                try:
                    if mode == "pipeline":
                        rate, chunks, per_step = pipeline(engine, bench)
                        for step, s in per_step.items():
                            steps.setdefault(step, []).append(s)
                    else:
                        rate = raw_write(engine, bench, vectors=mode == "raw", per_row=mode == "per_row")
                    rates[mode].append(rate)
                finally:
                    cleanup(engine, bench.name)
        med = {m: statistics.median(v) for m, v in rates.items() if v}
        rows.append(
            {
                "pack": name,
                "chunks": chunks,
                **{f"{m}_chunks_per_s": int(v) for m, v in med.items()},
                "pipeline_vs_raw": round(med["pipeline"] / med["raw"], 3),
                "pipeline_vs_raw_chunks": round(med["pipeline"] / med["raw_chunks"], 3),
                "step_seconds": {s: round(statistics.median(v), 3) for s, v in steps.items()},
            }
        )
    return rows


def _paired_round(engine: Engine, gdpr: DomainPack, names: list[str]) -> dict[str, Any]:
    """Raw writes, then the pipeline, of one fresh GDPR copy each, into the store as it is."""
    out: dict[str, Any] = {}
    for mode in ("raw", "pipeline"):
        bench = renamed(gdpr, f"bench_{uuid.uuid4().hex[:8]}")
        names.append(bench.name)
        out[mode] = pipeline(engine, bench)[0] if mode == "pipeline" else raw_write(engine, bench, vectors=True)
    out["pipeline_vs_raw"] = round(out["pipeline"] / out["raw"], 3)
    return out


def run_scale(engine: Engine, copies: int) -> dict[str, Any]:
    """Ingest ``copies`` GDPR packs of their own names into one growing store: the pipeline's rate
    per tenth, and a paired raw vs pipeline round on the empty store and again at full size (so a
    slowdown of the store itself shows in both). Every copy is removed afterwards."""
    gdpr = engine.pack("legal_regulatory")
    names: list[str] = []
    done: list[tuple[int, float]] = []  # (chunks, seconds) per copy
    tenths: list[dict[str, Any]] = []
    step = max(1, copies // 10)
    try:
        empty = _paired_round(engine, gdpr, names)
        for i in range(copies):
            bench = renamed(gdpr, f"bench_{uuid.uuid4().hex[:8]}")
            names.append(bench.name)
            started = time.perf_counter()
            _rate, chunks, _steps = pipeline(engine, bench)
            done.append((chunks, time.perf_counter() - started))
            if (i + 1) % step == 0 or i + 1 == copies:
                seg = done[-((i + 1) % step or step) :]  # the copies since the last report
                tenths.append(
                    {
                        "copies": i + 1,
                        "store_chunks": sum(c for c, _ in done),
                        "chunks_per_s": int(sum(c for c, _ in seg) / sum(s for _, s in seg)),
                        "load": round(os.getloadavg()[0], 2),
                    }
                )
                print(f"scale: {tenths[-1]}", file=sys.stderr, flush=True)
        full = _paired_round(engine, gdpr, names)
    finally:
        for name in names:
            cleanup(engine, name)
    return {
        "copies": copies,
        "chunks": sum(c for c, _ in done),
        "tenths": tenths,
        "last_vs_first_tenth": round(tenths[-1]["chunks_per_s"] / tenths[0]["chunks_per_s"], 3),
        "empty_store": empty,
        "at_full_size": full,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="rounds per pack (the median is reported)")
    ap.add_argument("--packs", default=PACKS, help="comma-separated pack names")
    ap.add_argument("--per-row", action="store_true", help="also time one transaction per chunk")
    ap.add_argument(
        "--scale", type=int, default=0, help="GDPR copies (own pack names) ingested into one store; 165 is ~100k chunks"
    )
    ap.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="PATH",
        help="the results as JSON: on stdout (no PATH, instead of the table), or also written to PATH",
    )
    args = ap.parse_args()

    logging.getLogger("neo4j").setLevel(logging.ERROR)  # the driver's notifications are not results
    with tempfile.TemporaryDirectory(prefix="rag-bench-") as tmp:
        engine = bench_engine(Path(tmp) / "artifacts")
        before = schema.current_embedder(engine.driver, engine.database)
        if before is not None and before["identity"] != engine.embedder_identity:
            raise SystemExit(
                f"the database's vector index is {before['identity']!r}'s; the bench writes with the hash embedder: "
                "run it on a Neo4j of its own (or an empty one)"
            )
        try:
            schema.ensure_schema(engine.driver, engine.database)
            result: dict[str, Any] = {
                "embedder": engine.embedder_identity,
                "rounds": args.repeat,
                "packs": run_packs(engine, [p for p in args.packs.split(",") if p], args.repeat, args.per_row),
            }
            if args.scale:
                result["scale"] = run_scale(engine, args.scale)
        finally:
            if before is None:  # leave the database as found: no index of ours stays active
                schema.reset_vector_index(engine.driver, engine.database)
            engine.close()
    if args.json == "-":
        print(json.dumps(result, indent=2))
        return
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"embedder {result['embedder']}, median of {args.repeat} rounds, chunks/s")
    print(
        f"{'pack':<18}{'chunks':>7}{'raw':>9}{'raw_chunks':>12}{'pipeline':>10}{'pipe/raw':>10}{'pipe/raw_chunks':>17}"
    )
    for r in result["packs"]:
        print(
            f"{r['pack']:<18}{r['chunks']:>7}{r['raw_chunks_per_s']:>9}{r['raw_chunks_chunks_per_s']:>12}"
            f"{r['pipeline_chunks_per_s']:>10}{r['pipeline_vs_raw']:>10.2f}{r['pipeline_vs_raw_chunks']:>17.2f}"
        )
        if "per_row_chunks_per_s" in r:
            print(f"{'':<18}per-row writes: {r['per_row_chunks_per_s']} chunks/s")
        print(f"{'':<18}pipeline step seconds: {r['step_seconds']}")
    if "scale" in result:
        sc = result["scale"]
        print(f"scale: {sc['copies']} GDPR copies, {sc['chunks']} chunks into one store; pipeline chunks/s per tenth:")
        for t in sc["tenths"]:
            print(
                f"  after {t['copies']:>4} copies ({t['store_chunks']:>7} chunks in store): "
                f"{t['chunks_per_s']:>6} (load {t['load']})"
            )
        print(f"  last tenth / first tenth {sc['last_vs_first_tenth']:.2f}; one fresh copy, raw vs pipeline chunks/s:")
        for label, key in (("empty store", "empty_store"), ("full store", "at_full_size")):
            r = sc[key]
            print(f"  {label:<12} raw {r['raw']:>6}, pipeline {r['pipeline']:>6} (pipe/raw {r['pipeline_vs_raw']:.2f})")


if __name__ == "__main__":
    main()
