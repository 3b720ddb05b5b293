"""A fresh process's first question against a warm one's, with and without the start-up warm-up
(``rag_engine.retrieval.warm``) that ``rag serve`` runs before it listens.

Each run is its own process (nothing cached): it builds the engine, optionally warms it, then
times its first ``retrieve`` and five more (other questions, the warm figure is their median).
The ratio first/warm is what ``rag serve``'s first request pays over a warm one in the query
path. Runs against the configured store with the hash embedder pinned, like ``evals.bench.query``
(a store that benchmark left with ``--keep``):

    python -m evals.bench.first_query --pack NAME [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from evals.bench.query import ROLE, WEIGHTS, bench_engine, questions, serve_synthetic


def one_run(warmed: bool, pack: str) -> dict[str, float]:
    from rag_engine.retrieval.retriever import retrieve
    from rag_engine.retrieval.warm import warm

    engine = bench_engine()
    serve_synthetic(engine, pack)
    qs = questions(engine)[:6]
    warm_ms = 0.0
    if warmed:
        t0 = time.perf_counter()
        warm(engine)
        warm_ms = (time.perf_counter() - t0) * 1000
    times = []
    for q in qs:
        t0 = time.perf_counter()
        retrieve(engine, q, ROLE, weights=WEIGHTS)
        times.append((time.perf_counter() - t0) * 1000)
    engine.close()
    later = statistics.median(times[1:])
    return {"warm_up_ms": warm_ms, "first_ms": times[0], "later_ms": later, "ratio": times[0] / later}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pack", required=True, help="the synthetic pack evals.bench.query kept (--pack NAME --keep)")
    ap.add_argument("--one", choices=["cold", "warmed"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one == "warmed", args.pack)))
        return
    print(f"load average {os.getloadavg()[0]:.2f}")
    rows: dict[str, list[dict[str, float]]] = {"cold": [], "warmed": []}
    for _ in range(args.runs):
        for mode in rows:  # interleaved: the load moves both alike
            out = subprocess.run(
                [sys.executable, "-m", "evals.bench.first_query", "--one", mode, "--pack", args.pack],
                capture_output=True,
                check=True,
            )
            rows[mode].append(json.loads(out.stdout.decode().strip().splitlines()[-1]))
    print("mode | warm-up ms | first ms | later ms (median of 5) | first/later")
    for mode, runs in rows.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        each = ", ".join(f"{r['ratio']:.2f}" for r in runs)
        print(
            f"{mode} | {med['warm_up_ms']:.0f} | {med['first_ms']:.0f} | {med['later_ms']:.0f} | {med['ratio']:.2f}"
            f" (runs: {each})"
        )
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
