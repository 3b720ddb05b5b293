"""Build (or check) the demo replay cassette: one extraction answer per chunk of every enabled pack.

The answers are FIXTURE data from a deterministic heuristic (evals/cassettes/heuristic_extractor.py),
not model output. Each entry is labelled fixture: true, source: fixture:heuristic-demo-extractor.

    python -m evals.cassettes.build_demo_cassette            # rewrite the cassette from scratch
    python -m evals.cassettes.build_demo_cassette --check    # exit 1 if any current chunk has no entry

Keys are what the replay provider looks up: generation_key(served model, build_messages(...),
RawExtraction), the same request the llm_extraction step sends. A corpus edit changes chunk ids
and texts, so the keys change: run --check (CI does, via tests/test_demo_cassette.py) and rebuild.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evals.cassettes.heuristic_extractor import FIXTURE_SOURCE, heuristic_extraction
from rag_engine.config import under_root
from rag_engine.documents import discover, load_document
from rag_engine.engine import Engine
from rag_engine.errors import ConfigError
from rag_engine.graph.extraction import build_messages
from rag_engine.graph.models import RawExtraction
from rag_engine.packs import ChunkRecord, DomainPack
from rag_engine.providers.registry import ModelSpec
from rag_engine.providers.replay import Cassette, generation_key
from rag_engine.providers.results import TokenUsage

# Graph provenance records the reported model: it must say this is fixture data, not a model.
REPORTED_MODEL = "fixture-heuristic-demo-extractor"
CONFIDENCE_FLOOR = 0.5


def extraction_spec(engine: Engine) -> ModelSpec:
    """The configured extraction model; it must be served by a replay provider with a cassette."""
    spec = engine.registry.extraction
    if spec.provider.kind != "replay" or not spec.provider.cassette:
        raise ConfigError(
            f"extraction model {spec.name!r} is served by {spec.provider.name!r} ({spec.provider.kind}), "
            "not a replay provider with a cassette; nothing to build"
        )
    return spec


def cassette_path(engine: Engine) -> Path:
    return under_root(engine.root, extraction_spec(engine).provider.cassette or "")


def iter_chunks(engine: Engine) -> Iterator[tuple[DomainPack, ChunkRecord]]:
    """Every current chunk of every enabled pack with LLM extraction on, in (pack, document, chunk) order."""
    for pack in (p for p in engine.packs.values() if p.entry.extraction):
        for ref in discover(pack):
            doc = load_document(pack, ref.partition_key, max_bytes=engine.cfg.max_document_bytes)
            for chunk in pack.chunk(doc):
                yield pack, chunk


def chunk_key(engine: Engine, pack: DomainPack, chunk: ChunkRecord) -> str:
    served = extraction_spec(engine).model.served_model
    return generation_key(served, build_messages(pack.manifest, chunk), RawExtraction)


def missing_chunks(engine: Engine, cassette: Cassette) -> list[str]:
    """Chunk ids of the current corpus that the cassette cannot answer."""
    return [
        chunk.chunk_id for pack, chunk in iter_chunks(engine) if cassette.get(chunk_key(engine, pack, chunk)) is None
    ]


def _usage(messages: list[dict[str, Any]], answer: str, *, first_of_pack: bool) -> TokenUsage:
    """Token counts at ~4 characters a token; the shared system prompt counts as cached after the
    first call of a pack, mimicking provider prompt caching. Deterministic, not measured."""
    system, user = messages[0]["content"], messages[1]["content"]
    return TokenUsage(
        input_tokens=(len(system) + len(user)) // 4,
        output_tokens=len(answer) // 4,
        cached_input_tokens=0 if first_of_pack else len(system) // 4,
    )


def build(engine: Engine, path: Path | None = None) -> dict[str, Any]:
    """Rewrite the cassette from scratch; return counts."""
    spec = extraction_spec(engine)
    path = path or cassette_path(engine)
    path.unlink(missing_ok=True)
    cassette = Cassette(path)
    per_pack: dict[str, int] = {}
    stats: dict[str, Any] = {
        "entries": 0,
        "entities": 0,
        "relationships": 0,
        "retrieval_eligible": 0,
        "per_pack": per_pack,
    }
    previous_pack = None
    for pack, chunk in iter_chunks(engine):
        messages = build_messages(pack.manifest, chunk)
        raw = heuristic_extraction(pack.name, pack.manifest, chunk)
        answer = raw.model_dump_json()
        cassette.put_generation(
            spec.model.served_model,
            messages,
            answer,
            schema=RawExtraction,
            reported_model=REPORTED_MODEL,
            usage=_usage(messages, answer, first_of_pack=pack.name != previous_pack),
            source=FIXTURE_SOURCE,
        )
        previous_pack = pack.name
        stats["entries"] += 1
        per_pack[pack.name] = per_pack.get(pack.name, 0) + 1
        stats["entities"] += len(raw.entities)
        stats["relationships"] += len(raw.relationships)
        stats["retrieval_eligible"] += sum(r.confidence >= CONFIDENCE_FLOOR for r in raw.relationships)
    stats["bytes"] = path.stat().st_size if path.exists() else 0
    return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="only verify that every current chunk has an entry; exit 1 if not"
    )
    args = parser.parse_args(argv)
    engine = Engine.from_path()
    path = cassette_path(engine)
    started = time.perf_counter()
    if args.check:
        if not path.is_file():
            print(
                f"cassette {path.name} does not exist; build it with: python -m evals.cassettes.build_demo_cassette",
                file=sys.stderr,
            )
            return 1
        misses = missing_chunks(engine, Cassette(path))
        if misses:
            print(
                f"cassette {path.name}: {len(misses)} current chunk(s) have no entry (e.g. {misses[0]}); "
                "rebuild with: python -m evals.cassettes.build_demo_cassette",
                file=sys.stderr,
            )
            return 1
        print(f"cassette {path.name}: every current chunk has an entry ({time.perf_counter() - started:.2f}s)")
        return 0
    stats = build(engine, path)
    rels = stats["relationships"]
    share = stats["retrieval_eligible"] / rels if rels else 0.0
    print(
        f"wrote {stats['entries']} fixture entries to {path.name} ({stats['bytes']:,} bytes) "
        f"in {time.perf_counter() - started:.2f}s: per pack {stats['per_pack']}, "
        f"{stats['entities']} entities, {rels} relationships, {share:.0%} at confidence >= {CONFIDENCE_FLOOR}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
