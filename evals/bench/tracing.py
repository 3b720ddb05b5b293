"""The query path's tracing overhead: the same questions with tracing off and on, in one run.

``run_query`` (no generation, no local inference: policy gate, legs, fusion, rerank, sentence
evidence, the extractive answer, the audit record) over the golden questions, in alternating
slices (off-on, then on-off, after a warm-up pass in each mode): off (the default: no provider,
``tracing.span`` a no-op) and on (a real SDK provider whose batch processor exports over OTLP/HTTP
to a loopback receiver in a process of its own, as a collector is, which answers 200 and counts
what it got). The hash embedder
is pinned (``evals.bench.ingest.bench_engine``), so the store must be the hash embedder's:
``make bench-sizing`` runs it on the store it just grew.

    python -m evals.bench.tracing [--rounds 6] [--questions 120] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import statistics
import tempfile
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
    counts: Any = None  # (requests, bytes): shared with the benchmark's process

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with self.counts.get_lock():
            self.counts[0] += 1
            self.counts[1] += len(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def _receive(counts: Any, ports: Any) -> None:
    """The receiver's own process (as a collector is): answer every export on a free loopback port."""
    _Receiver.counts = counts
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    ports.put(server.server_address[1])
    server.serve_forever()


def _slice(engine: Any, qs: list[str]) -> list[float]:
    times = []
    for q in qs:
        started = time.perf_counter()
        run_query(engine, q, ROLE, generate=False, local_inference=False)
        times.append((time.perf_counter() - started) * 1000)
    return times


def run(rounds: int, limit: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    counts, ports = ctx.Array("q", 2), ctx.Queue()
    receiver = ctx.Process(target=_receive, args=(counts, ports), daemon=True)
    receiver.start()
    endpoint = f"http://127.0.0.1:{ports.get(timeout=60)}/v1/traces"
    off: list[float] = []
    on: list[float] = []
    pairs: list[float] = []
    with tempfile.TemporaryDirectory(prefix="rag-tracing-") as tmp:
        engine = bench_engine(Path(tmp) / "artifacts")
        try:
            qs = questions(engine)[:limit]
            # warm the driver, the store's caches and the rerank model in both modes first
            for enabled in (False, True):
                tracing.configure(enabled=enabled, endpoint=endpoint)
                _slice(engine, qs)
            for i in range(rounds):  # off-on, then on-off: a drift in load weighs on both alike
                times: dict[bool, list[float]] = {}
                for enabled in (False, True) if i % 2 == 0 else (True, False):
                    tracing.configure(enabled=enabled, endpoint=endpoint)
                    times[enabled] = _slice(engine, qs)
                off += times[False]
                on += times[True]
                pairs.append(statistics.median(times[True]) / statistics.median(times[False]))
            tracing.flush()
            tracing.configure(enabled=False)
        finally:
            engine.close()
            receiver.terminate()
    return {
        "questions": len(qs),
        "rounds": rounds,
        "off_p50_ms": round(statistics.median(off), 2),
        "on_p50_ms": round(statistics.median(on), 2),
        "on_vs_off_p50": round(statistics.median(on) / statistics.median(off), 3),
        "on_vs_off_mean": round(statistics.fmean(on) / statistics.fmean(off), 3),
        "per_round_p50_ratio": [round(r, 3) for r in pairs],
        "otlp_requests": counts[0],
        "otlp_bytes": counts[1],
        "load": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6, help="alternating off/on slices over all questions")
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
