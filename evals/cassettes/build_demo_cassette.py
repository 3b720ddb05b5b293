"""Build (or check) the demo replay cassette: one extraction answer per chunk of every enabled pack,
and one answer per golden question.

The answers are FIXTURE data from deterministic rules (evals/cassettes/heuristic_extractor.py,
evals/cassettes/grounded_answerer.py), not model output. Each entry is labelled fixture: true and
source: fixture:heuristic-demo-extractor or fixture:grounded-demo-answerer.

    python -m evals.cassettes.build_demo_cassette            # rewrite the extraction entries
    python -m evals.cassettes.build_demo_cassette --check    # exit 1 if any current chunk has no entry
    python -m evals.cassettes.build_demo_cassette --answers  # re-record the golden answers (ingested store)
    python -m evals.cassettes.build_demo_cassette --demo-answer  # the `make demo` question (on the demo's store)

Keys are what the replay provider looks up: generation_key(served model, build_messages(...),
RawExtraction), the same request the llm_extraction step sends. A corpus edit changes chunk ids
and texts, so the keys change: run --check (CI does, via tests/test_demo_cassette.py) and rebuild.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from evals.cassettes.grounded_answerer import ANSWER_SOURCE, GroundedFixtureBackend
from evals.cassettes.heuristic_extractor import FIXTURE_SOURCE, heuristic_extraction
from rag_engine.config import under_root
from rag_engine.engine import Engine
from rag_engine.errors import ConfigError
from rag_engine.graph.extraction import build_messages
from rag_engine.graph.models import RawExtraction
from rag_engine.ingest.documents import discover, load_document
from rag_engine.packs import ChunkRecord, DomainPack
from rag_engine.providers.clients import ModelClient, build_client
from rag_engine.providers.registry import ModelSpec
from rag_engine.providers.replay import Cassette, ReplayBackend, generation_key
from rag_engine.providers.results import TokenUsage
from rag_engine.retrieval.answer import AnswerDraft

# Graph provenance records the reported model: it must say this is fixture data, not a model.
REPORTED_MODEL = "fixture-heuristic-demo-extractor"
CONFIDENCE_FLOOR = 0.5
ANSWER_KEYS = set(AnswerDraft.model_fields)


def _replay_spec(spec: ModelSpec, role: str, nothing_to: str) -> ModelSpec:
    """``spec`` if a replay provider with a cassette serves it, else a ConfigError naming the role."""
    if spec.provider.kind != "replay" or not spec.provider.cassette:
        raise ConfigError(
            f"{role} model {spec.name!r} is served by {spec.provider.name!r} ({spec.provider.kind}), "
            f"not a replay provider with a cassette; nothing to {nothing_to}"
        )
    return spec


def extraction_spec(engine: Engine) -> ModelSpec:
    """The configured extraction model; it must be served by a replay provider with a cassette."""
    return _replay_spec(engine.registry.extraction, "extraction", "build")


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
    first call of a pack, mimicking provider prompt caching. Deterministic, not measured: recorded
    as estimated (``reported: false``), so the cost priced from them is marked estimated."""
    system, user = messages[0]["content"], messages[1]["content"]
    return TokenUsage.from_characters(len(system) + len(user), len(answer), 0 if first_of_pack else len(system))


def is_answer_entry(entry: dict[str, Any]) -> bool:
    """An entry answering the engine's answer request (``AnswerDraft``), not an extraction."""
    parsed = (entry.get("response") or {}).get("parsed")
    return isinstance(parsed, dict) and set(parsed) == ANSWER_KEYS


DEMO_SOURCE = f"{ANSWER_SOURCE}:demo-question"
"""The source of the `make demo` question's answer: recorded on the demo's own store (two packs,
so its fulltext statistics and context differ from the eval's), kept when golden answers are re-recorded."""


def _keep_lines(path: Path, keep: Callable[[dict[str, Any]], bool]) -> list[str]:
    """The cassette's lines whose entry ``keep`` accepts, in their order."""
    if not path.is_file():
        return []
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [line for line in lines if keep(json.loads(line))]


def is_golden_answer(entry: dict[str, Any]) -> bool:
    """An answer to a golden question: re-recorded by ``build_answers`` (the demo question's
    answer is recorded on the demo's store by ``build_demo_answer`` and kept)."""
    return is_answer_entry(entry) and entry.get("source") != DEMO_SOURCE


def build_demo_answer(engine: Engine) -> dict[str, Any]:
    """Record the answer to the `make demo` question (evals/cassettes/demo_question.py, asked by
    rag_assets/demo.py) on the store ``engine`` reads: run it after `make demo` ingested the demo
    packs. Replaces an earlier demo answer."""
    from evals.cassettes.demo_question import QUESTION, ROLE
    from rag_engine.retrieval.query import run_query

    spec = generation_spec(engine)
    path = under_root(engine.root, spec.provider.cassette or "")
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    path.write_text("".join(ln + "\n" for ln in lines if json.loads(ln).get("source") != DEMO_SOURCE), encoding="utf-8")
    backend = ReplayBackend(spec, Cassette(path), live=GroundedFixtureBackend(), record_source=DEMO_SOURCE)
    engine.use_client(spec.name, ModelClient(spec, backend, ledger=engine.ledger, pricing=engine.pricing))
    outcome = run_query(engine, QUESTION, ROLE)
    if outcome.answer.method != "model":
        raise ConfigError(
            f"the demo question got no recorded answer ({outcome.answer.reason or outcome.answer.error_type})"
        )
    return {"question": QUESTION, "citations": list(outcome.answer.citations)}


def build(engine: Engine, path: Path | None = None) -> dict[str, Any]:
    """Rewrite the cassette's extraction entries from scratch (answer entries are kept, after
    them); return counts."""
    spec = extraction_spec(engine)
    path = path or cassette_path(engine)
    kept_answers = _keep_lines(path, is_answer_entry)  # golden and demo answers alike
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
    if kept_answers:
        with path.open("a", encoding="utf-8") as fh:
            fh.write("\n".join(kept_answers) + "\n")
    stats["answers_kept"] = len(kept_answers)
    stats["bytes"] = path.stat().st_size if path.exists() else 0
    return stats


# ---------------------------------------------------------------------------------------
# Answers to the golden questions (needs the ingested store: the eval's exact requests)


def generation_spec(engine: Engine) -> ModelSpec:
    """The default generation model; it must be served by a replay provider with a cassette."""
    return _replay_spec(engine.registry.generation, "generation", "record")


def build_answers(
    engine: Engine, path: Path | None = None, *, golden: list[Path] | None = None, progress: Any = print
) -> dict[str, Any]:
    """Re-record the answer to every golden question of every enabled pack: the eval's own run
    (``evals.runner.run_eval``) against the ingested store, so every key is the exact request the
    eval makes. The old answer entries are dropped first (extraction entries are kept).
    ``golden``: these golden files instead of the configured ones (tests).

    With ``record: true`` and a ``record_provider`` on the replay provider, the live provider
    answers (``source: recorded:<provider>``); otherwise the FIXTURE answerer does
    (``evals/cassettes/grounded_answerer.py``, ``source: fixture:grounded-demo-answerer``).
    """
    from evals.runner import run_eval

    spec = generation_spec(engine)
    path = path or under_root(engine.root, spec.provider.cassette or "")
    kept = _keep_lines(path, lambda e: not is_golden_answer(e))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    if spec.provider.record:
        live = "recorded:" + str(spec.provider.record_provider)
        client = build_client(spec, ledger=engine.ledger, env=engine.env, root=engine.root, config=engine.cfg)
        if path != under_root(engine.root, spec.provider.cassette or ""):
            raise ConfigError("record mode writes to the configured cassette only; drop the path argument")
    else:
        live = ANSWER_SOURCE
        backend = ReplayBackend(spec, Cassette(path), live=GroundedFixtureBackend(), record_source=ANSWER_SOURCE)
        client = ModelClient(spec, backend, ledger=engine.ledger, pricing=engine.pricing)
    engine.use_client(spec.name, client)
    paths = golden or [engine.root / p for p in engine.cfg.evals.golden]
    report = run_eval(engine, paths, generate=True, progress=progress)
    answers = _keep_lines(path, is_golden_answer)
    gen = report.generation
    if gen.failed:
        raise ConfigError(f"{gen.failed} golden questions got no recorded answer: {dict(gen.failures or {})}")
    return {
        "answers": len(answers),
        "source": live,
        "questions": len(report.queries),
        "decided_before_any_call": gen.no_call,
        "bytes": path.stat().st_size,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="only verify that every current chunk has an entry; exit 1 if not"
    )
    parser.add_argument(
        "--answers",
        action="store_true",
        help="re-record the answers to every golden question (needs the ingested store: run `rag ingest` "
        "first, on a fresh database as make eval does)",
    )
    parser.add_argument(
        "--demo-answer",
        action="store_true",
        help="record the answer to the `make demo` question on the store it reads (run after `make demo`)",
    )
    args = parser.parse_args(argv)
    engine = Engine.from_path()
    started = time.perf_counter()
    if args.demo_answer:
        try:
            print(json.dumps(build_demo_answer(engine)))
        finally:
            engine.close()
        return 0
    if args.answers:
        try:
            answers = build_answers(engine, progress=lambda m: print(m, file=sys.stderr))
        finally:
            engine.close()
        print(
            f"recorded {answers['answers']} answers ({answers['source']}) for {answers['questions']} golden "
            f"questions ({answers['decided_before_any_call']} decided before any model call) in "
            f"{time.perf_counter() - started:.2f}s"
        )
        return 0
    path = cassette_path(engine)
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
