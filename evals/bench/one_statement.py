"""The query path's store work as ONE statement, against the raw hybrid query and the engine,
interleaved question by question, at the size of a kept benchmark dataset.

``python -m evals.bench.query`` finds the engine at about 2x the raw hybrid query at 10k chunks
with every stage on, and its statements alone at 1.16-1.30x. This measures one redesign that
keeps the rerank stage's inputs: ``store.measurement.one_statement_reads`` is the engine's own
legs statement, plain RRF of its two legs written in Cypher, and the rerank stage's own read of
the top candidates (cosines, unit vectors, titles, cited rows), sent in one round trip as the raw
query is sent (``execute_query``). No Python ranking runs after it. Whatever that statement costs
over the raw query is spent before fusion's rules, the sentence evidence and the features, which
``evals.bench.query``'s stage table measures. It is one design, not a proven minimum (see its
docstring for what it does more and less than the engine).

Run it on a dataset ``evals.bench.query`` built and kept (the same database and pack name):

    python -m evals.bench.query --sizes 10000 --repeat 1 --pack NAME --keep
    python -m evals.bench.one_statement --pack NAME [--repeat 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from evals.bench import query as bench
from rag_engine.engine import Engine
from rag_engine.governance.policy import gate
from rag_engine.retrieval.retriever import retrieve
from rag_engine.store import schema
from rag_engine.store.measurement import chunk_count, index_epoch, one_statement_reads
from rag_engine.text.sentences import SPLITTER_VERSION

RUNS = ("raw", "engine", "one_statement")


def one_statement(
    engine: Engine,
    question: str,
    collections: list[str],
    meta: dict[str, Any],
    epoch: Any,
    *,
    evidence_n: int | None = None,
) -> dict[str, Any]:
    """The one statement for ``question`` (embedded as the raw query embeds it) with the engine's
    configured sizes: its row. ``meta``: the active index (``schema.current_embedder``);
    ``evidence_n``: how many of the top get a cosine and units (default ``evidence.top_n``)."""
    cfg = engine.cfg.retrieval
    return one_statement_reads(
        engine.driver,
        engine.database,
        text=question,
        embedding=engine.embed_texts([question], purpose="query")[0],
        expected_epoch=epoch,
        index=meta["index"],
        prop=meta["property"],
        collections=collections,
        packs=sorted(engine.packs),
        lexical_k=cfg.lexical_k,
        dense_k=cfg.dense_k,
        rrf_k=cfg.rrf_k,
        top_n=cfg.rerank.top_n,
        evidence_n=cfg.evidence.top_n if evidence_n is None else evidence_n,
        splitter=SPLITTER_VERSION,
    )


def measure(engine: Engine, qs: list[str], repeat: int) -> dict[str, list[float]]:
    """Each question's ms per run (``RUNS``), the three interleaved so the load moves them alike,
    their order rotated from one question to the next so none always follows another."""
    collections = list(gate(engine.cfg, bench.ROLE, None).collections)
    meta = schema.current_embedder(engine.driver, engine.database)
    if meta is None:
        raise SystemExit("no vector index: build the dataset with python -m evals.bench.query --keep first")
    if meta["identity"] != engine.embedder_identity:
        raise SystemExit(f"the store's index is {meta['identity']}'s, not the bench embedder's: use the kept dataset")
    epoch = index_epoch(engine.driver, engine.database)
    first = one_statement(engine, qs[0], collections, meta, epoch)
    if epoch is None or not first["dense"] or not first["top"]:  # else a leg or the top read would be skipped
        raise SystemExit("the one statement ran without its vector leg or top read: is the pack served and indexed?")
    for q in qs[:5]:  # warm caches and the Cypher planner once
        retrieve(engine, q, bench.ROLE, weights=bench.WEIGHTS)
        bench.raw_hybrid(engine, q, collections, meta["index"])
        one_statement(engine, q, collections, meta, epoch)
    times: dict[str, list[float]] = {run: [] for run in RUNS}

    def run_once(run: str, q: str) -> None:
        if run == "raw":
            bench.raw_hybrid(engine, q, collections, meta["index"])
        elif run == "engine":
            retrieve(engine, q, bench.ROLE, weights=bench.WEIGHTS)
        else:
            one_statement(engine, q, collections, meta, epoch)

    for _ in range(repeat):
        for n, q in enumerate(qs):
            for run in RUNS[n % 3 :] + RUNS[: n % 3]:
                started = time.perf_counter()
                run_once(run, q)
                times[run].append((time.perf_counter() - started) * 1000)
    return times


def summary(times: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """p50, p95 and mean ms of each run, and p50 and p95 as a ratio to the raw query's."""
    raw50, raw95 = float(np.percentile(times["raw"], 50)), float(np.percentile(times["raw"], 95))
    out = {}
    for run, ms in times.items():
        p50, p95 = float(np.percentile(ms, 50)), float(np.percentile(ms, 95))
        out[run] = {
            "p50": p50,
            "p95": p95,
            "mean": statistics.mean(ms),
            "p50_ratio": p50 / raw50,
            "p95_ratio": p95 / raw95,
        }
    return out


def render(figures: dict[str, dict[str, float]]) -> str:
    lines = [
        "| run | p50 ms | p95 ms | mean ms | p50 / raw | p95 / raw |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for run, f in figures.items():
        ms = f"{f['p50']:.2f} | {f['p95']:.2f} | {f['mean']:.2f}"
        lines.append(f"| {run} | {ms} | {f['p50_ratio']:.2f} | {f['p95_ratio']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pack", required=True, help="the synthetic pack evals.bench.query built and kept")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()

    logging.getLogger("neo4j").setLevel(logging.ERROR)  # the driver's notifications are not results
    engine = bench.bench_engine()
    try:
        size = chunk_count(engine.driver, engine.database, args.pack)
        if not size:
            raise SystemExit(f"no chunk of pack {args.pack!r}: build it with python -m evals.bench.query --keep first")
        bench.serve_synthetic(engine, args.pack)
        qs = bench.questions(engine)
        before = os.getloadavg()[0]
        print(f"{len(qs)} golden questions x {args.repeat} repeats on {size} synthetic chunks; load {before:.2f}")
        figures = summary(measure(engine, qs, args.repeat))
        after = os.getloadavg()[0]
        print(render(figures))
        print(f"load average {before:.2f} before, {after:.2f} after")
    finally:
        engine.close()
    if args.json:
        args.json.write_text(json.dumps({"size": size, "load": [before, after], "runs": figures}, indent=2))


if __name__ == "__main__":
    main()
