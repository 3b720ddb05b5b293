"""Extraction measured per model, the way the design measures it: a markdown table, one row a model.

For each model, a sample of one pack's chunks (spread over the whole corpus, the same chunks for
every model) goes through what the llm_extraction step does per chunk: the engine's prompt
(``build_messages``), ``ModelClient.generate`` with the extraction schema and the step's
``max_tokens``, then the engine's own ``validate`` (type whitelist, grounding in the chunk). Per
model: chunks run, tokens per chunk (as the provider reported them) against the minimum (one-line
instruction, the chunk, the same answer without what the engine knows, estimated at ~4 characters
a token: ``evals.bench.extraction``), calls that failed by reason (an answer cut at max_tokens, one
that does not match the schema, a timeout, ...), entities and relationships proposed and kept,
records rejected by reason, seconds per chunk, and the projected time to extract each pack whose
extraction is on (its chunk count x seconds per chunk, one call at a time as the local server
serves them).

The replay fixture (``demo-chat``) answers from the cassette written by a heuristic extractor:
its seconds are a file lookup, its entities are the heuristic's. A local model needs its server
(``make llm-start``; RAG_LLM_ENDPOINT). Nothing is written to Neo4j; usage goes to a temporary
ledger.

    python -m evals.bench.extraction_models [--pack legal_regulatory] [--chunks 10]
        [--model demo-chat --model smollm2-135m] [--max-output-tokens 256] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from evals.bench.extraction import MINIMAL_INSTRUCTION, minimal_answer
from rag_engine.config import EngineConfig
from rag_engine.engine import Engine, project_root
from rag_engine.errors import ProviderError, ProviderResponseInvalid
from rag_engine.graph.entity_resolution import EntityResolver
from rag_engine.graph.extraction import build_messages, prompt_hash, validate
from rag_engine.graph.models import RawExtraction
from rag_engine.ingest.documents import discover, load_document
from rag_engine.packs import ChunkRecord, DomainPack
from rag_engine.providers.ratelimit import estimate_tokens

DEFAULT_MODELS = ("demo-chat", "smollm2-135m")


def with_model(cfg: EngineConfig, model: str, *, output_tokens: int | None = None) -> EngineConfig:
    """``cfg`` with ``model`` as the extraction and generation model and its provider enabled
    (the local model is configured but off by default); ``output_tokens`` caps each extraction call."""
    spec = cfg.model(model)
    if spec is None:
        raise SystemExit(f"unknown model {model!r}")
    providers = tuple(p.model_copy(update={"enabled": True}) if p.name == spec.provider else p for p in cfg.providers)
    updates: dict[str, Any] = {
        "providers": providers,
        "defaults": cfg.defaults.model_copy(update={"extraction_model": model, "generation_model": model}),
    }
    if output_tokens is not None:
        updates["budgets"] = cfg.budgets.model_copy(update={"max_output_tokens": output_tokens})
    return cfg.model_copy(update=updates)


def pack_chunks(engine: Engine, pack: DomainPack) -> list[ChunkRecord]:
    out: list[ChunkRecord] = []
    for ref in discover(pack):
        doc = load_document(pack, ref.partition_key, max_bytes=engine.cfg.max_document_bytes)
        out.extend(pack.chunk(doc))
    return out


def spread(items: list[ChunkRecord], n: int) -> list[ChunkRecord]:
    """``n`` items evenly spaced over the list (deterministic: the same sample for every model)."""
    if n >= len(items):
        return list(items)
    step = len(items) / n
    return [items[math.floor(i * step)] for i in range(n)]


def _failure(exc: ProviderError, max_tokens: int) -> str:
    """Why a call failed: its error type; an invalid answer that used every allowed output token
    was cut at max_tokens (incomplete JSON), any other invalid answer did not match the schema."""
    if isinstance(exc, ProviderResponseInvalid) and exc.usage is not None and exc.usage.output_tokens:
        return "cut_at_max_tokens" if exc.usage.output_tokens >= max_tokens else "schema_invalid"
    return type(exc).__name__


def measure(engine: Engine, pack_name: str, sample: list[ChunkRecord], pack_sizes: dict[str, int]) -> dict[str, Any]:
    pack = engine.pack(pack_name)
    spec = engine.registry.extraction
    client = engine.client(spec.name)
    resolver = EntityResolver(pack.name, pack.manifest.aliases)
    phash = prompt_hash(pack.manifest)
    tolerant = not spec.supports("structured_output")
    failed: Counter[str] = Counter()
    rejected: Counter[str] = Counter()
    tokens, minimum, seconds = [], [], []
    proposed_e = proposed_r = kept_e = kept_r = 0
    for chunk in sample:
        started = time.perf_counter()
        try:
            result = client.generate(
                build_messages(pack.manifest, chunk),
                schema=RawExtraction,
                purpose="extraction_benchmark",
                tolerant=tolerant,
                max_tokens=engine.cfg.budgets.max_output_tokens,
            )
        except ProviderError as exc:
            seconds.append(time.perf_counter() - started)
            failed[_failure(exc, engine.cfg.budgets.max_output_tokens)] += 1
            if exc.usage is not None:
                tokens.append(exc.usage.input_tokens + exc.usage.output_tokens)
            continue
        seconds.append(time.perf_counter() - started)
        raw = result.parsed
        assert isinstance(raw, RawExtraction), "generate(schema=RawExtraction) answers a RawExtraction"
        tokens.append(result.usage.input_tokens + result.usage.output_tokens)
        slim = minimal_answer(raw.model_dump(mode="json"))
        minimum.append(estimate_tokens([MINIMAL_INSTRUCTION, f"{chunk.heading}\n{chunk.text}", slim]))
        checked = validate(
            raw, chunk, pack.manifest, resolver, engine.cfg.graph, run_id="bench", model=spec.identity, prompt=phash
        )
        proposed_e += len(raw.entities)
        proposed_r += len(raw.relationships)
        kept_e += len(checked.entities)
        kept_r += len(checked.relationships)
        rejected.update(checked.rejected)
    per_chunk = statistics.mean(seconds) if seconds else 0.0
    return {
        "model": spec.name,
        "identity": spec.identity,
        "chunks": len(sample),
        "valid_answers": len(sample) - sum(failed.values()),
        "failed": dict(failed),
        "tokens_per_chunk": round(statistics.mean(tokens), 1) if tokens else None,
        "minimum_per_chunk": round(statistics.mean(minimum), 1) if minimum else None,
        "entities": {"proposed": proposed_e, "kept": kept_e},
        "relationships": {"proposed": proposed_r, "kept": kept_r},
        "rejected": dict(rejected),
        "seconds_per_chunk": round(per_chunk, 3),
        "projected_hours": {name: round(n * per_chunk / 3600, 2) for name, n in pack_sizes.items()},
    }


def _reasons(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])) or "none"


def markdown(rows: list[dict[str, Any]], pack: str, pack_sizes: dict[str, int]) -> str:
    packs = list(pack_sizes)
    head = [
        "model",
        f"{pack} chunks run",
        "valid answers",
        "calls failed (reason)",
        "tokens/chunk (minimum)",
        "entities kept/proposed",
        "relationships kept/proposed",
        "rejected (reason)",
        "s/chunk",
        *(f"{p} ({pack_sizes[p]} chunks), h" for p in packs),
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [
            r["identity"],
            str(r["chunks"]),
            str(r["valid_answers"]),
            _reasons(r["failed"]),
            f"{r['tokens_per_chunk']} ({r['minimum_per_chunk']})",
            f"{r['entities']['kept']}/{r['entities']['proposed']}",
            f"{r['relationships']['kept']}/{r['relationships']['proposed']}",
            _reasons(r["rejected"]),
            f"{r['seconds_per_chunk']:.2f}",
            *(f"{r['projected_hours'][p]:.2f}" for p in packs),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pack", default="legal_regulatory")
    ap.add_argument("--chunks", type=int, default=10, help="chunks sampled, spread over the pack")
    ap.add_argument("--model", action="append", help=f"a generation model of the config (default: {DEFAULT_MODELS})")
    ap.add_argument("--max-output-tokens", type=int, default=None, help="default: budgets.max_output_tokens")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import os

    root = project_root()
    base = Engine.from_path(root=root).cfg
    with tempfile.TemporaryDirectory(prefix="extraction-bench-") as tmp:
        env = {**os.environ, "RAG_LEDGER_URL": f"sqlite:///{Path(tmp) / 'ledger.sqlite'}"}
        probe = Engine(base, root, env)
        sizes = {p.name: len(pack_chunks(probe, p)) for p in probe.packs.values() if p.entry.extraction}
        sample = spread(pack_chunks(probe, probe.pack(args.pack)), args.chunks)
        rows = []
        for model in args.model or DEFAULT_MODELS:
            engine = Engine(with_model(base, model, output_tokens=args.max_output_tokens), root, env)
            try:
                rows.append(measure(engine, args.pack, sample, sizes))
            finally:
                engine.ledger.dispose()
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(markdown(rows, args.pack, sizes))


if __name__ == "__main__":
    main()
