"""Indexing throughput of the active embedder: first ingest (empty cache) vs re-ingest (cache).

    .venv/bin/python tools/embed-local/measure.py [--pack legal_regulatory] [--queries 20]

Ingests the pack twice through the engine's own pipeline (no LLM extraction) with a fresh,
private embedding cache, and reports chunk_index chunks/s for both runs (the second must make
no embedding call), then the per-query embedding latency over the pack's golden questions.
Uses NEO4J_URI / RAG_EMBED_ENDPOINT like every command; the machine load is printed with the
figures because the machine may be shared. One run each: a measurement, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

from rag_engine.engine import Engine
from rag_engine.ingest.pipeline import ingest_pack


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pack", default="legal_regulatory")
    ap.add_argument("--queries", type=int, default=20, help="golden questions to time (query embeddings)")
    args = ap.parse_args(argv)

    base = Engine.from_path()
    work = Path(tempfile.mkdtemp(prefix="embed-measure-"))
    storage = base.cfg.storage.model_copy(
        update={"embedding_cache": str(work / "cache.sqlite"), "artifacts_dir": str(work / "artifacts")}
    )
    engine = Engine(
        base.cfg.model_copy(update={"storage": storage}),
        base.root,
        {**base.env, "RAG_LEDGER_URL": f"sqlite:///{work / 'ledger.sqlite'}"},
    )
    base.close()
    pack = engine.pack(args.pack)
    spec = engine.registry.embedding
    out: dict = {"embedder": spec.identity, "batch_size": spec.model.batch_size, "pack": pack.name}
    try:
        for label in ("first_ingest", "reingest_from_cache"):
            before = _load()
            report = ingest_pack(engine, pack, extract=False)["chunk_index"]
            if report.failed:
                print(json.dumps(report.failed, indent=2), file=sys.stderr)
                return 1
            chunks = report.total("embedded")
            out[label] = {
                "chunks": chunks,
                "seconds": report.seconds,
                "chunks_per_s": round(chunks / report.seconds, 1),
                "embed_requests": report.total("embed_requests"),
                "cache_hits": report.total("embed_cache_hits"),
                "load_before": before,
                "load_after": _load(),
            }
            print(f"[{label}] {out[label]}", file=sys.stderr)
        golden = yaml.safe_load((engine.root / engine.cfg.pack(pack.name).fixtures / "queries.yaml").read_text())
        questions = [q["question"] for q in golden["queries"]][: args.queries]
        engine.embed_texts(questions[:1], purpose="query")  # warm the connection
        times = []
        for q in questions:
            started = time.perf_counter()
            engine.embed_texts([q], purpose="query")
            times.append((time.perf_counter() - started) * 1000)
        out["query_embed_ms"] = {
            "n": len(times),
            "p50": round(statistics.median(times), 1),
            "max": round(max(times), 1),
            "load": _load(),
        }
    finally:
        engine.close()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
