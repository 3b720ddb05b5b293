"""A one-off `rag query` (a fresh process asking one question) against `rag --help`, in one run.

Runs ``rag --help`` and ``rag query QUESTION --role ROLE`` alternately, each in a fresh process
(``python -m rag_engine.cli``, this interpreter), ``--runs`` times, and reports the median wall
time of each, their ratio and the 1-minute load average before and after (the machine is shared:
the ratio, measured within one run, is the figure; absolute times move with the load). Every
query must exit 0. It runs against the configured store and embedder (``NEO4J_URI``,
``RAG_EMBED_ENDPOINT``): ingest the pack first (the default question is the demo's KB one,
``rag ingest --pack company_x_kb``).

    python -m evals.bench.one_off [--runs 5] [--question Q --role R] [--no-generate] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

QUESTION = "How many days of annual leave do full-time employees get?"
"""The question `make demo` suggests next (company_x_kb); role ``employee``."""
ROLE = "employee"


def _wall(args: list[str]) -> float:
    """Seconds one fresh `rag` process takes, start to exit; its failure stops the benchmark."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rag_engine.cli", *args], capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"rag {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return wall


def run(runs: int, question: str, role: str, generate: bool) -> dict[str, Any]:
    query = ["query", question, "--role", role, *([] if generate else ["--no-generate"])]
    load_before = os.getloadavg()[0]
    helps: list[float] = []
    queries: list[float] = []
    for i in range(runs):  # alternating, the order swapped every run: the load moves both alike
        pair = [(helps, ["--help"]), (queries, query)]
        for times, args in pair if i % 2 == 0 else reversed(pair):
            times.append(_wall(args))
    help_s, query_s = statistics.median(helps), statistics.median(queries)
    return {
        "runs": runs,
        "question": question,
        "role": role,
        "generate": generate,
        "help_s": round(help_s, 3),
        "query_s": round(query_s, 3),
        "ratio": round(query_s / help_s, 2),
        "help_each_s": [round(t, 3) for t in helps],
        "query_each_s": [round(t, 3) for t in queries],
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--question", default=QUESTION)
    ap.add_argument("--role", default=ROLE)
    ap.add_argument("--no-generate", action="store_true", help="pass --no-generate to rag query")
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args()
    result = run(args.runs, args.question, args.role, generate=not args.no_generate)
    print("rag --help | rag query | query/help | load average before -> after")
    print(
        f"{result['help_s']:.2f} s | {result['query_s']:.2f} s | {result['ratio']:.2f}x | "
        f"{result['load_before']:.2f} -> {result['load_after']:.2f}"
    )
    print(f"each: help {result['help_each_s']}, query {result['query_each_s']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
