"""The llm_extraction step: chunks -> validated graph records, under a per-run budget.

Budgets (chunks and tokens per run) are shared by every partition of a run. When one runs out
the step stops calling the model, records which chunks were skipped and why, and still
succeeds: a later run picks them up, and the cache makes the already-extracted ones free.
"""

from __future__ import annotations

import logging
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from rag_engine.engine import Engine
from rag_engine.errors import CapabilityNotSupported, ProviderError, ProviderResponseInvalid
from rag_engine.graph.entity_resolution import EntityResolver
from rag_engine.graph.extraction import build_messages, prompt_hash, validate
from rag_engine.graph.extraction_cache import ExtractionCache, cache_key
from rag_engine.graph.models import RawExtraction
from rag_engine.ingest import load_chunks
from rag_engine.packs import ChunkRecord, DomainPack

log = logging.getLogger(__name__)
EXTRACTION = "llm_extraction"
STATUS = "llm_extraction_status"


def budget_skipped_partitions(engine: Engine, pack: DomainPack, keys: list[str]) -> list[str]:
    """Partitions whose last extraction stopped at a budget: a later run should continue them."""
    out = []
    for key in keys:
        if engine.artifacts.exists(pack.name, key, STATUS) and \
                engine.artifacts.read(pack.name, key, STATUS).get("skipped", 0) > 0:
            out.append(key)
    return out


@dataclass
class RunBudget:
    """Shared by all partitions of one run; checked before each batch of model calls."""

    max_chunks: int
    max_tokens: int
    chunks: int = 0
    tokens: int = 0
    cost: Decimal | None = Decimal(0)
    cache_hits: int = 0
    failures: int = 0
    skipped: int = 0
    rejected: Counter = field(default_factory=Counter)

    def remaining_chunks(self) -> int:
        if self.tokens >= self.max_tokens:
            return 0
        return max(0, self.max_chunks - self.chunks)

    def exhausted_reason(self) -> str:
        return "max_tokens_per_run" if self.tokens >= self.max_tokens else "max_chunks_per_run"

    def charge(self, tokens: int, cost: Decimal | None) -> None:
        self.chunks += 1
        self.tokens += tokens
        self.cost = None if cost is None or self.cost is None else self.cost + cost

    def status(self) -> str:
        if self.skipped:
            return "budget_exhausted"
        return "partial_failures" if self.failures else "complete"


def new_budget(engine: Engine) -> RunBudget:
    b = engine.cfg.budgets
    return RunBudget(max_chunks=b.max_chunks_per_run, max_tokens=b.max_tokens_per_run)


def _cache(engine: Engine) -> ExtractionCache:
    return ExtractionCache(engine.artifacts.base / "_extraction_cache")


def _rebind(raw: RawExtraction, asked: str, current: str) -> RawExtraction:
    """Same content under a new version's chunk id: what the model said about the chunk it was
    asked about now belongs to the current chunk. Anything naming another chunk stays foreign."""
    if asked == current:
        return raw
    swap = lambda cid: current if cid == asked else cid  # noqa: E731
    return raw.model_copy(update={
        "chunk_id": swap(raw.chunk_id),
        "relationships": [r.model_copy(update={"chunk_id": swap(r.chunk_id)}) for r in raw.relationships],
    })


def extraction_step(engine: Engine, pack: DomainPack, key: str, *, run_id: str, budget: RunBudget) -> dict[str, Any]:
    chunks = load_chunks(engine, pack, key)
    spec = engine.registry.extraction
    client = engine.client(spec.name)
    phash = prompt_hash(pack.manifest)
    resolver = EntityResolver(pack.name, pack.manifest.aliases)
    cache = _cache(engine)
    tolerant = not spec.supports("structured_output")

    raw_by_chunk: dict[str, tuple[RawExtraction, str, str]] = {}  # chunk -> (raw, origin run, model)
    todo: list[ChunkRecord] = []
    for chunk in chunks:
        hit = cache.get(cache_key(chunk.content_hash, phash, spec.identity))
        if hit:
            budget.cache_hits += 1
            raw = _rebind(RawExtraction.model_validate(hit["raw"]), hit["chunk_id"], chunk.chunk_id)
            raw_by_chunk[chunk.chunk_id] = (raw, hit["run_id"], hit["model"])
        else:
            todo.append(chunk)

    skipped: dict[str, str] = {}
    failed: dict[str, str] = {}

    def call(chunk: ChunkRecord):
        return client.generate(build_messages(pack.manifest, chunk), schema=RawExtraction,
                               purpose="graph_extraction", run_id=run_id, tolerant=tolerant)

    size = engine.cfg.budgets.batch_size
    with ThreadPoolExecutor(max_workers=size) as pool:
        for start in range(0, len(todo), size):
            batch = todo[start:start + size]
            allowed = batch[: budget.remaining_chunks()]
            for chunk in batch[len(allowed):]:
                skipped[chunk.chunk_id] = budget.exhausted_reason()
            futures = [(chunk, pool.submit(call, chunk)) for chunk in allowed]
            for chunk, fut in futures:
                try:
                    result = fut.result()
                except CapabilityNotSupported:
                    raise  # a configuration error, not a per-chunk failure
                except ProviderError as exc:
                    # an attempted call counts against the budget even when it failed: a model
                    # that keeps answering garbage must still be bounded. An invalid answer was
                    # billed (its tokens are in the ledger), so the run's cost becomes unknown here.
                    budget.charge(0, None if isinstance(exc, ProviderResponseInvalid) else Decimal(0))
                    failed[chunk.chunk_id] = type(exc).__name__
                    log.warning("extraction failed for %s: %s", chunk.chunk_id, type(exc).__name__)
                    continue
                usage = result.usage
                budget.charge(usage.input_tokens + usage.output_tokens, usage.cost)
                model = usage.reported_model or spec.model.served_model
                raw_by_chunk[chunk.chunk_id] = (result.parsed, run_id, model)
                cache.put(cache_key(chunk.content_hash, phash, spec.identity),
                          {"raw": result.parsed.model_dump(mode="json"), "run_id": run_id, "model": model,
                           "chunk_id": chunk.chunk_id, "prompt_hash": phash, "model_identity": spec.identity})
    budget.skipped += len(skipped)
    budget.failures += len(failed)

    records = []
    rejected: Counter[str] = Counter()
    for chunk in chunks:
        if chunk.chunk_id not in raw_by_chunk:
            continue
        raw, origin_run, model = raw_by_chunk[chunk.chunk_id]
        validated = validate(raw, chunk, pack.manifest, resolver, engine.cfg.graph,
                             run_id=origin_run, model=model, prompt=phash)
        rejected.update(validated.rejected)
        records.append(validated.model_dump(mode="json"))
    budget.rejected.update(rejected)
    # a small status file beside the records: the sensor reads it to continue budget-skipped work
    engine.artifacts.write(pack.name, key, STATUS, {"skipped": len(skipped), "failed": len(failed)})
    engine.artifacts.write(pack.name, key, EXTRACTION, {
        "complete": not skipped and not failed, "prompt_hash": phash, "model_identity": spec.identity,
        "records": records, "skipped": skipped, "failed": failed, "rejected": dict(rejected)})
    return {
        "chunks": len(chunks), "extracted": len(records), "skipped": len(skipped), "failed": len(failed),
        "entities": sum(len(r["entities"]) for r in records),
        "relationships": sum(len(r["relationships"]) for r in records),
        "rejected": sum(rejected.values()),
    }


def finish_run(engine: Engine, pack: DomainPack, run_id: str, budget: RunBudget) -> dict[str, Any]:
    """Record the run as an (:ExtractionRun) node and return its summary."""
    from rag_engine.graph import writer

    spec = engine.registry.extraction
    summary = {
        "run_id": run_id, "model": spec.identity, "prompt_hash": prompt_hash(pack.manifest),
        "chunks": budget.chunks, "cache_hits": budget.cache_hits, "tokens": budget.tokens,
        "cost": None if budget.cost is None else format(budget.cost, "f"), "status": budget.status(),
        "skipped": budget.skipped, "failures": budget.failures,
    }
    writer.write_extraction_run(engine.driver, engine.database, pack=pack.name, **summary)
    return {**summary, "rejected": dict(budget.rejected)}
