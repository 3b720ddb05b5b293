"""Neo4j sizing per chunk (docs/deployment.md): store size on disk and heap, measured as the store grows.

``--copies N`` GDPR copies under their own pack names (605 chunks each, as ``evals.bench.ingest
--scale``) are ingested one after another with the hash embedder (384 dimensions, as e5-small's),
no model calls. At the empty store and after each quarter of the copies it measures the heap and
the files as they are (``disk_bytes_live``: Community has no ``db.checkpoint``, so recent writes may
sit in the transaction logs); ``--finish``, run once Neo4j is stopped (a clean shutdown checkpoints),
measures the files again (``disk_bytes``). The parts:

- the store files on disk by what holds them: the record store (nodes, relationships,
  properties, strings and arrays: read through Neo4j's page cache), the native indexes (range,
  token lookup: page cache too), the Lucene indexes (fulltext, vector: memory-mapped by the OS,
  outside the page cache) and the transaction logs;
- the JVM heap in use after a full GC (``jcmd``: what the store keeps on the heap at rest).

Per chunk figures come from the growth between the empty store and the last measurement, so the
fixed cost of an empty database is not divided into them. Run it on a Neo4j of its own
(``make bench-sizing``); the store is left as it is for the next step and removed with its directory.

    python -m evals.bench.sizing --copies 165 --store-dir var/bench-sizing/neo4j --json out.json
    (stop Neo4j) python -m evals.bench.sizing --finish --store-dir var/bench-sizing/neo4j --json out.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from evals.bench.ingest import bench_engine, pipeline, renamed
from rag_engine.engine import Engine
from rag_engine.store import schema
from rag_engine.store.measurement import store_counts

LUCENE = ("fulltext", "vector")
NATIVE = ("range", "token-lookup", "point", "text")


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def disk(store_dir: Path) -> dict[str, int]:
    """Bytes on disk of the default database by part (apparent sizes)."""
    data = store_dir / "db" / "data"
    db = data / "databases" / "neo4j"
    index = db / "schema" / "index"
    parts = {"record_store": 0, "native_indexes": 0, "lucene_indexes": 0, "transaction_logs": 0}
    for f in db.iterdir() if db.exists() else []:
        if f.is_file():
            parts["record_store"] += f.stat().st_size
    for provider in index.iterdir() if index.exists() else []:
        kind = "lucene_indexes" if provider.name.startswith(LUCENE) else "native_indexes"
        parts[kind] += _size(provider)
    parts["transaction_logs"] = _size(data / "transactions" / "neo4j")
    return parts


def heap_used(store_dir: Path) -> int | None:
    """The Neo4j JVM's heap in use after a full GC, in bytes (None without jcmd or a pid)."""
    pid_file = store_dir / "neo4j.pid"
    if not pid_file.exists():
        return None
    pid = pid_file.read_text().strip()
    try:
        subprocess.run(["jcmd", pid, "GC.run"], check=True, capture_output=True, timeout=60)
        out = subprocess.run(["jcmd", pid, "GC.heap_info"], check=True, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"used (\d+)K", out.stdout)
    return int(m.group(1)) * 1024 if m else None


def counts(engine: Engine) -> dict[str, int]:
    return store_counts(engine.driver, engine.database)


def measure(engine: Engine, store_dir: Path, copies: int) -> dict[str, Any]:
    return {
        "copies": copies,
        **counts(engine),
        "disk_bytes_live": disk(store_dir),
        "heap_used_bytes": heap_used(store_dir),
        "load": round(os.getloadavg()[0], 2),
    }


def per_chunk(first: dict[str, Any], last: dict[str, Any], final_disk: dict[str, int]) -> dict[str, float | None]:
    """Bytes per chunk: the files after shutdown less the empty store's, the heap growth at rest."""
    chunks = last["chunks"] - first["chunks"]
    base = first["disk_bytes_live"]
    out: dict[str, float | None] = {f"{k}_bytes": round((final_disk[k] - base[k]) / chunks, 1) for k in final_disk}
    grown = final_disk["record_store"] + final_disk["native_indexes"] - base["record_store"] - base["native_indexes"]
    out["page_cache_bytes"] = round(grown / chunks, 1)
    heap0, heap1 = first["heap_used_bytes"], last["heap_used_bytes"]
    out["heap_bytes"] = round((heap1 - heap0) / chunks, 1) if heap0 is not None and heap1 is not None else None
    return out


def run(copies: int, store_dir: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rag-sizing-") as tmp:
        engine = bench_engine(Path(tmp) / "artifacts")
        try:
            schema.ensure_schema(engine.driver, engine.database)
            gdpr = engine.pack("legal_regulatory")
            steps = [measure(engine, store_dir, 0)]
            quarter = max(1, copies // 4)
            started = time.perf_counter()
            for i in range(copies):
                pipeline(engine, renamed(gdpr, f"size_{uuid.uuid4().hex[:8]}"))
                if ((i + 1) % quarter == 0 or i + 1 == copies) and steps[-1]["copies"] != i + 1:
                    steps.append(measure(engine, store_dir, i + 1))
                    print(f"sizing: {steps[-1]}", file=sys.stderr, flush=True)
            seconds = round(time.perf_counter() - started, 1)
        finally:
            engine.close()
    return {
        "embedder": "hash-embed-384",
        "ingest_seconds": seconds,
        "steps": steps,
    }


def finish(result: dict[str, Any], store_dir: Path) -> dict[str, Any]:
    """The files once Neo4j has stopped (checkpointed), and the figures per chunk from them."""
    final = disk(store_dir)
    steps = result["steps"]
    return {**result, "disk_bytes": final, "per_chunk": per_chunk(steps[0], steps[-1], final)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=165, help="GDPR copies (605 chunks each); 165 is ~100k chunks")
    ap.add_argument("--store-dir", type=Path, required=True, help="the Neo4j's NEO4J_LOCAL_DIR (its pid file and db/)")
    ap.add_argument("--json", type=Path, help="also write the results here (--finish: read and complete them)")
    ap.add_argument("--finish", action="store_true", help="Neo4j stopped: measure the files, add the per chunk figures")
    args = ap.parse_args()
    logging.getLogger("neo4j").setLevel(logging.ERROR)
    if args.finish:
        if args.json is None:
            raise SystemExit("--finish completes the --json file of the ingest run: give --json")
        result = finish(json.loads(args.json.read_text(encoding="utf-8")), args.store_dir)
    else:
        result = run(args.copies, args.store_dir)
    text = json.dumps(result, indent=2)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
