"""The query service under load, paired with the in-process call it makes as the control.

One synthetic store (built with ``evals.bench.query``'s functions: its sentence pool, its batched
writer, the hash embedder with the dense leg forced on) is read two ways in the same run:

- the service: ``rag serve`` started as a separate process on loopback, ``clients`` concurrent
  HTTP clients in a closed loop sending ``POST /v1/retrieve`` with questions drawn from the golden
  set, under a principal whose key is generated for this run (only its SHA-256 reaches the
  service, through an environment variable; the key itself is never printed or written);
- the control: ``run_query(generate=False)`` in this process, the call the service makes for
  ``/v1/retrieve``, from ``clients`` threads in a closed loop over the same questions.

Both read the same config file, so both run the same query path. The run is cut into slices
alternating service and control (ABBA), so the machine's load moves both alike; the figure that
matters is the ratio service p95 / in-process p95. The service's limits are set far above the
load (rate, burst, per-principal concurrency) so the run measures latency, not the limiter, and
its worker pool has one worker per client (``--workers`` to change it), like the control's
threads. Latency percentiles count answered requests; every other outcome is counted by its
status (or exception type) under errors.

    python -m evals.bench.serving [--chunks 10000] [--clients 50] [--seconds 60] [--slices 4]
                                  [--warmup 5] [--workers N] [--json out.json] [--out-dir var/bench/serving]

Needs NEO4J_URI pointing at an empty database (``make bench-serving`` starts its own) and
RAG_LEDGER_URL for the audit records both paths write.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import os
import random
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

from evals.bench.query import BENCH_EMBEDDER, ROLE, WEIGHTS, cleanup, grow, prepare_store, questions, sentence_pool
from rag_engine import DEFAULT_CONFIG, yaml_safe
from rag_engine.config import under_root
from rag_engine.engine import Engine, project_root
from rag_engine.retrieval.query import run_query
from rag_engine.store.measurement import chunk_count

KEY_ENV = "RAG_BENCH_KEY_SHA256"
PRINCIPAL = "bench-client"
SERVICE, CONTROL = "service", "in_process"


def bench_config(root: Path, out: Path, clients: int, workers: int) -> Path:
    """The shipped config with the hash embedder active (dense leg on, as the query benchmark),
    one principal keyed by ``KEY_ENV`` and limits above the load; written under ``out``."""
    cfg = yaml_safe.load_file(under_root(root, DEFAULT_CONFIG))
    cfg["defaults"]["embedding_model"] = BENCH_EMBEDDER
    for model in cfg["models"]:
        if model["name"] == BENCH_EMBEDDER:
            model["dense_weight"] = WEIGHTS["dense"]
    cfg["storage"]["artifacts_dir"] = str(out / "artifacts")
    cfg["storage"]["embedding_cache"] = None
    cfg["serving"] = {
        "principals": [{"id": PRINCIPAL, "roles": [ROLE], "key_sha256_env": KEY_ENV}],
        "limits": {
            "requests_per_minute": 10_000_000,
            "burst": 1_000_000,
            "concurrent_per_principal": clients,
            "workers": workers,
            "request_timeout_seconds": 300,
        },
    }
    path = out / "engine.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_service(config: Path, digest: str, log: Path, timeout: float = 120) -> tuple[subprocess.Popen[bytes], str]:
    """`rag serve` as its own process on a free loopback port; returns it and its URL once
    /v1/health answers ok."""
    port = free_port()
    rag = Path(sys.executable).with_name("rag")
    cmd = [str(rag), "--config", str(config), "serve", "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as sink:
        proc = subprocess.Popen(cmd, env={**os.environ, KEY_ENV: digest}, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"rag serve exited with {proc.returncode} before answering; see {log}")
        try:
            if httpx.get(f"{url}/v1/health", timeout=2).json().get("store") == "ok":
                return proc, url
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.3)
    stop_service(proc)
    raise SystemExit(f"rag serve did not answer /v1/health within {timeout:g}s; see {log}")


def stop_service(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


Sample = tuple[float, str]
"""One request: milliseconds and its outcome ("200", another status, or an exception type)."""


async def _http_slice(url: str, key: str, qs: list[str], clients: int, seconds: float, seed: int) -> list[Sample]:
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=300, limits=limits) as client:
        deadline = time.perf_counter() + seconds

        async def one_client(i: int) -> list[Sample]:
            rng, out = random.Random(seed + i), []
            while time.perf_counter() < deadline:
                body = {"question": rng.choice(qs)}
                t0 = time.perf_counter()
                try:
                    outcome = str((await client.post("/v1/retrieve", json=body)).status_code)
                except httpx.HTTPError as exc:
                    outcome = type(exc).__name__
                out.append(((time.perf_counter() - t0) * 1000, outcome))
            return out

        per_client = await asyncio.gather(*(one_client(i) for i in range(clients)))
    return [s for samples in per_client for s in samples]


def service_slice(url: str, key: str, qs: list[str], clients: int, seconds: float, seed: int) -> list[Sample]:
    return asyncio.run(_http_slice(url, key, qs, clients, seconds, seed))


def control_slice(engine: Engine, qs: list[str], clients: int, seconds: float, seed: int) -> list[Sample]:
    """The service's call for /v1/retrieve, from ``clients`` threads in a closed loop."""
    deadline = time.perf_counter() + seconds

    def one_client(i: int) -> list[Sample]:
        rng, out = random.Random(seed + i), []
        while time.perf_counter() < deadline:
            question = rng.choice(qs)
            t0 = time.perf_counter()
            try:
                run_query(engine, question, ROLE, generate=False, actor="bench-control")
                outcome = "200"
            except Exception as exc:  # noqa: BLE001 - counted by type, like a status
                outcome = type(exc).__name__
            out.append(((time.perf_counter() - t0) * 1000, outcome))
        return out

    with ThreadPoolExecutor(max_workers=clients, thread_name_prefix="bench-control") as pool:
        per_client = list(pool.map(one_client, range(clients)))
    return [s for samples in per_client for s in samples]


def summary(samples: list[Sample], seconds: float) -> dict[str, Any]:
    ok = [ms for ms, outcome in samples if outcome == "200"]
    errors = Counter(outcome for _, outcome in samples if outcome != "200")

    def pct(p: float) -> float | None:
        return round(float(np.percentile(ok, p)), 1) if ok else None

    return {
        "requests": len(samples),
        "ok": len(ok),
        "throughput_rps": round(len(ok) / seconds, 2) if seconds else 0.0,
        "p50_ms": pct(50),
        "p95_ms": pct(95),
        "p99_ms": pct(99),
        "errors": dict(sorted(errors.items())),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def render(result: dict[str, Any]) -> str:
    clients = result["clients"]
    rows = [
        ("service: POST /v1/retrieve over HTTP", f"{clients} clients", result[SERVICE]),
        ("in-process run_query(generate=False)", f"{clients} threads", result[CONTROL]),
    ]
    lines = [
        "| path | concurrency | requests | ok | req/s | p50 ms | p95 ms | p99 ms | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, conc, s in rows:
        errors = ", ".join(f"{k}: {v}" for k, v in s["errors"].items()) or "none"
        lines.append(
            f"| {name} | {conc} | {s['requests']} | {s['ok']} | {s['throughput_rps']} | {s['p50_ms']} "
            f"| {s['p95_ms']} | {s['p99_ms']} | {errors} |"
        )
    r = result["ratio"]
    per_slice = [x for x in result["slice_p95_ratios"] if x is not None]
    spread = (
        f"; per slice pair {min(per_slice):.2f} / {statistics.median(per_slice):.2f} / {max(per_slice):.2f} "
        "(min / median / max)"
        if per_slice
        else ""
    )
    lines += [
        "",
        f"service / in-process: p50 x{r['p50']}, p95 x{r['p95']}, p99 x{r['p99']} (target: p95 within x1.3){spread}",
        f"{result['chunks']} chunks; {result['slices']} slices of {result['slice_seconds']:g} s per path, "
        f"alternating (ABBA); service workers {result['workers']}; rate, burst and per-principal concurrency "
        "limits set above the load, so this measures latency, not the limiter",
        f"load average (1, 5, 15 min) before {fmt_load(result['load_before'])}, "
        f"after {fmt_load(result['load_after'])}; {result['cpus']} CPUs",
    ]
    return "\n".join(lines)


def fmt_load(load: list[float]) -> str:
    return " ".join(f"{x:.2f}" for x in load)


def run(args: argparse.Namespace) -> dict[str, Any]:
    root = project_root()
    out: Path = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    workers = args.workers or args.clients
    config = bench_config(root, out, args.clients, workers)
    engine = Engine.from_path(config, root)
    key = secrets.token_urlsafe(32)  # this run's only key: held in memory, sent as a bearer token
    digest = hashlib.sha256(key.encode()).hexdigest()
    pack = args.pack or f"benchs_{uuid.uuid4().hex[:8]}"
    proc = None
    try:
        prepare_store(engine)
        pool, qs = sentence_pool(engine), questions(engine)
        have = chunk_count(engine.driver, engine.database, pack)
        build_s = grow(engine, pack, pool, have, args.chunks, random.Random(7 + have)) if args.chunks > have else 0.0
        print(f"{max(have, args.chunks)} synthetic chunks (built in {build_s:.1f}s); {len(qs)} questions", flush=True)
        proc, url = start_service(config, digest, out / "serve.log")
        auth = {"Authorization": f"Bearer {key}"}
        for q in qs[:10]:  # warm both: caches, the Cypher planner, the service's first requests
            run_query(engine, q, ROLE, generate=False, actor="bench-control")
            httpx.post(f"{url}/v1/retrieve", json={"question": q}, headers=auth, timeout=60)
        warm = min(args.warmup, args.seconds)  # concurrent: worker threads and the driver's connection pool grow
        service_slice(url, key, qs, args.clients, warm, seed=-1)
        control_slice(engine, qs, args.clients, warm, seed=-1)
        slice_s = args.seconds / args.slices
        samples: dict[str, list[Sample]] = {SERVICE: [], CONTROL: []}
        slice_p95: list[float | None] = []
        load_before = list(os.getloadavg())
        for i in range(args.slices):
            order = (SERVICE, CONTROL) if i % 2 == 0 else (CONTROL, SERVICE)
            p95s: dict[str, float | None] = {}
            for path in order:
                seed = 1000 * i
                got = (
                    service_slice(url, key, qs, args.clients, slice_s, seed)
                    if path == SERVICE
                    else control_slice(engine, qs, args.clients, slice_s, seed)
                )
                samples[path] += got
                p95s[path] = summary(got, slice_s)["p95_ms"]
                print(f"slice {i + 1}/{args.slices} {path}: {len(got)} requests, p95 {p95s[path]} ms", flush=True)
            slice_p95.append(_ratio(p95s[SERVICE], p95s[CONTROL]))
        load_after = list(os.getloadavg())
    finally:
        if proc is not None:
            stop_service(proc)
        if not args.keep:
            cleanup(engine, pack)
        engine.close()
    total = slice_s * args.slices
    svc, ctl = summary(samples[SERVICE], total), summary(samples[CONTROL], total)
    return {
        "chunks": args.chunks,
        "clients": args.clients,
        "workers": workers,
        "seconds_per_path": args.seconds,
        "slices": args.slices,
        "slice_seconds": slice_s,
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": load_after,
        SERVICE: svc,
        CONTROL: ctl,
        "ratio": {p: _ratio(svc[f"{p}_ms"], ctl[f"{p}_ms"]) for p in ("p50", "p95", "p99")},
        "slice_p95_ratios": slice_p95,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=10_000)
    ap.add_argument("--clients", type=int, default=50, help="concurrent clients (and control threads)")
    ap.add_argument("--seconds", type=float, default=60, help="seconds of load per path (a smoke: 4)")
    ap.add_argument("--slices", type=int, default=4, help="alternations of the two paths")
    ap.add_argument("--warmup", type=float, default=5, help="seconds of unmeasured load per path first")
    ap.add_argument("--workers", type=int, help="the service's engine workers (default: --clients)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--out-dir", type=Path, default=Path("var/bench/serving"), help="config, service log")
    ap.add_argument("--pack", help="name of the synthetic pack (default: a fresh one)")
    ap.add_argument("--keep", action="store_true", help="keep the synthetic chunks for a later run")
    args = ap.parse_args()
    logging.getLogger("neo4j").setLevel(logging.ERROR)  # the driver's notifications are not results
    result = run(args)
    table = render(result)
    print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**result, "table": table}, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
