"""The query path's tracing overhead: the same questions with tracing off and on, in one run.

``run_query`` (no generation, no local inference: policy gate, legs, fusion, rerank, sentence
evidence, the extractive answer, the audit record) over the golden questions, in alternating
slices: off (the default: no provider, ``tracing.span`` a no-op) and on (a real SDK provider whose
batch processor exports over OTLP/HTTP to a loopback receiver started here, which answers 200 and
counts what it got). The hash embedder is pinned (``evals.bench.ingest.bench_engine``), so the
store must be the hash embedder's: ``make bench-sizing`` runs it on the store it just grew.

    python -m evals.bench.tracing [--rounds 5] [--questions 120] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from evals.bench.ingest import bench_engine
from evals.bench.query import questions
from rag_engine import tracing
from rag_engine.retrieval.query import run_query

ROLE = "legal_analyst"


class _Receiver(BaseHTTPRequestHandler):
    received = 0
    bytes = 0

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).received += 1
        type(self).bytes += len(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def _slice(engine: Any, qs: list[str]) -> list[float]:
    times = []
    for q in qs:
        started = time.perf_counter()
        run_query(engine, q, ROLE, generate=False, local_inference=False)
        times.append((time.perf_counter() - started) * 1000)
    return times


def run(rounds: int, limit: int) -> dict[str, Any]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    off: list[float] = []
    on: list[float] = []
    pairs: list[float] = []
    with tempfile.TemporaryDirectory(prefix="rag-tracing-") as tmp:
        engine = bench_engine(Path(tmp) / "artifacts")
        try:
            qs = questions(engine)[:limit]
            _slice(engine, qs[:5])  # warm the driver, caches and the rerank model
            for _ in range(rounds):
                tracing.configure(enabled=False)
                a = _slice(engine, qs)
                tracing.configure(enabled=True, endpoint=endpoint)
                b = _slice(engine, qs)
                off += a
                on += b
                pairs.append(statistics.median(b) / statistics.median(a))
            tracing.flush()
            tracing.configure(enabled=False)
        finally:
            engine.close()
            server.shutdown()
    return {
        "questions": len(qs),
        "rounds": rounds,
        "off_p50_ms": round(statistics.median(off), 2),
        "on_p50_ms": round(statistics.median(on), 2),
        "on_vs_off_p50": round(statistics.median(on) / statistics.median(off), 3),
        "on_vs_off_mean": round(statistics.fmean(on) / statistics.fmean(off), 3),
        "per_round_p50_ratio": [round(r, 3) for r in pairs],
        "otlp_requests": _Receiver.received,
        "otlp_bytes": _Receiver.bytes,
        "load": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="alternating off/on slices over all questions")
    ap.add_argument("--questions", type=int, default=120, help="the first N golden questions per slice")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    logging.getLogger("neo4j").setLevel(logging.ERROR)
    result = run(args.rounds, args.questions)
    text = json.dumps(result, indent=2)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
