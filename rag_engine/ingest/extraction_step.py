"""The llm_extraction step: chunks -> validated graph records, under a per-run budget.

Budgets (chunks and tokens per run) are shared by every partition of a run. When one runs out
the step stops calling the model, records which chunks were skipped and why, and still
succeeds: a later run picks them up, and the cache makes the already-extracted ones free.

The token budget is checked per call, before the call: a call starts only if its worst case
(estimated prompt tokens + the max output tokens it is allowed) fits what is left after the
tokens already billed and the worst cases of the calls still running. Every call's billed tokens
count, failed and schema-invalid answers included; an answer whose usage is unknown is charged
its worst case.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from rag_engine.engine import Engine
from rag_engine.errors import CapabilityNotSupported, ProviderError, ProviderResponseInvalid, ProviderTimeout
from rag_engine.graph import writer
from rag_engine.graph.entity_resolution import EntityResolver
from rag_engine.graph.extraction import build_messages, prompt_hash, validate
from rag_engine.graph.extraction_cache import ExtractionCache, cache_key
from rag_engine.graph.models import RawExtraction
from rag_engine.ingest.steps import load_chunks
from rag_engine.packs import ChunkRecord, DomainPack
from rag_engine.providers.ratelimit import estimate_tokens
from rag_engine.providers.results import GenerationResult
from rag_engine.store.extraction_runs import run_count

log = logging.getLogger(__name__)
EXTRACTION = "llm_extraction"
STATUS = "llm_extraction_status"


def budget_skipped_partitions(engine: Engine, pack: DomainPack, keys: list[str]) -> list[str]:
    """Partitions whose last extraction stopped at a budget: a later run should continue them."""
    out = []
    for key in keys:
        if (
            engine.artifacts.exists(pack.name, key, STATUS)
            and engine.artifacts.read(pack.name, key, STATUS).get("skipped", 0) > 0
        ):
            out.append(key)
    return out


PROMPT_MARGIN = 1.25
"""A prompt's estimate (characters / 4) is multiplied by at least this before it is reserved: real
tokenizers count more tokens than characters / 4 on some text, and two calls reserved on the bare
estimate let 4,023 tokens through a 4,000-token budget."""


@dataclass
class RunBudget:
    """Shared by all partitions of one run; every call reserves its worst case before it starts
    (``start``) and settles to what it was billed (``settle``), both under the budget's lock, so
    calls started from any number of threads never reserve more than the budget together."""

    max_chunks: int
    max_tokens: int
    max_output_tokens: int = 2048
    batch_size: int = 8
    """Extraction calls running at once."""
    first_run: bool = False
    """The pack's first paid extraction run, on ``budgets.first_run``."""
    chunks: int = 0
    """Calls started."""
    tokens: int = 0
    """Tokens billed (as reported; the worst case when a billed answer did not say)."""
    reserved: int = 0
    """Worst cases of the calls still running."""
    prompt_ratio: float = 1.0
    """Reported / estimated prompt tokens, learnt from answers (never below 1)."""
    cost: Decimal | None = Decimal(0)
    cache_hits: int = 0
    failures: int = 0
    skipped: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def worst_case(self, prompt_estimate: int) -> int:
        return math.ceil(prompt_estimate * max(self.prompt_ratio, PROMPT_MARGIN)) + self.max_output_tokens

    def start(self, worst_case: int) -> str | None:
        """Reserve a call's worst case; the reason it may not start, or None if it may."""
        with self._lock:
            if self.chunks >= self.max_chunks:
                return "max_chunks_per_run"
            if self.tokens + self.reserved + worst_case > self.max_tokens:
                return "max_tokens_per_run"
            self.chunks += 1
            self.reserved += worst_case
            return None

    def settle(
        self, worst_case: int, billed: int, cost: Decimal | None, *, prompt_estimate: int = 0, prompt_tokens: int = 0
    ) -> None:
        """A call ended: its reservation becomes what it was billed."""
        with self._lock:
            self.reserved -= worst_case
            self.tokens += billed
            self.cost = None if cost is None or self.cost is None else self.cost + cost
            if prompt_estimate > 0 and prompt_tokens > prompt_estimate:
                self.prompt_ratio = max(self.prompt_ratio, prompt_tokens / prompt_estimate)

    def status(self) -> str:
        if self.skipped:
            return "budget_exhausted"
        return "partial_failures" if self.failures else "complete"


def new_budget(engine: Engine, pack: str | None = None) -> RunBudget:
    """The run's budget: ``budgets``, or ``budgets.first_run`` for ``pack``'s first extraction run
    with a paid model (none recorded in the store yet)."""
    b = engine.cfg.budgets
    spec = engine.registry.extraction
    paid = spec.provider.hosted or spec.model.pricing_ref is not None
    if pack is not None and b.first_run is not None and paid and run_count(engine.driver, engine.database, pack) == 0:
        f = b.first_run  # never looser than the configured budget
        return RunBudget(
            max_chunks=min(f.max_chunks_per_run, b.max_chunks_per_run),
            max_tokens=min(f.max_tokens_per_run, b.max_tokens_per_run),
            max_output_tokens=b.max_output_tokens,
            batch_size=min(f.batch_size, b.batch_size),
            first_run=True,
        )
    return RunBudget(
        max_chunks=b.max_chunks_per_run,
        max_tokens=b.max_tokens_per_run,
        max_output_tokens=b.max_output_tokens,
        batch_size=b.batch_size,
    )


def _billed_on_failure(exc: ProviderError, worst_case: int) -> tuple[int, Decimal | None]:
    """(tokens, cost) a failed call is charged: what the provider reported; the worst case when it
    answered (or may have) without saying; nothing when it refused before any work."""
    usage = exc.usage
    if usage is not None and (usage.input_tokens or usage.output_tokens):
        return usage.input_tokens + usage.output_tokens, usage.cost
    if isinstance(exc, (ProviderResponseInvalid, ProviderTimeout)):
        return worst_case, None
    return 0, Decimal(0)


def _cache(engine: Engine) -> ExtractionCache:
    return ExtractionCache(engine.artifacts.base / "_extraction_cache")


def chunk_cache_keys(engine: Engine, pack: DomainPack, chunks: Sequence[ChunkRecord]) -> list[str]:
    """Each chunk's extraction cache key, as the step looks it up: (content hash, the pack's prompt
    hash, the extraction model's identity). One place, so an estimate asks what the step will."""
    phash, identity = prompt_hash(pack.manifest), engine.registry.extraction.identity
    return [cache_key(chunk.content_hash, phash, identity) for chunk in chunks]


def uncached_chunks(engine: Engine, pack: DomainPack, chunks: Sequence[ChunkRecord]) -> list[ChunkRecord]:
    """The chunks an extraction run would call the model for: the others are answered from the
    cache (a re-run after a rules change, or a new version's unchanged chunks, costs nothing)."""
    cache = _cache(engine)
    return [c for c, key in zip(chunks, chunk_cache_keys(engine, pack, chunks), strict=True) if not cache.has(key)]


def extraction_step(engine: Engine, pack: DomainPack, key: str, *, run_id: str, budget: RunBudget) -> dict[str, Any]:
    if not pack.entry.extraction:  # the pack is configured without LLM extraction: no model call
        return {"extracted": 0, "disabled": 1}
    chunks = load_chunks(engine, pack, key)
    spec = engine.registry.extraction
    client = engine.client(spec.name)
    phash = prompt_hash(pack.manifest)
    resolver = EntityResolver(pack.name, pack.manifest.aliases)
    cache = _cache(engine)
    keys = dict(zip((c.chunk_id for c in chunks), chunk_cache_keys(engine, pack, chunks), strict=True))
    tolerant = not spec.supports("structured_output")

    raw_by_chunk: dict[str, tuple[RawExtraction, str, str]] = {}  # chunk -> (raw, origin run, model)
    todo: list[ChunkRecord] = []
    for chunk in chunks:
        hit = cache.get(keys[chunk.chunk_id])
        if hit:
            budget.cache_hits += 1
            # the answer names no chunk: what was said about this text belongs to this version's chunk
            raw = RawExtraction.model_validate(hit["raw"])
            raw_by_chunk[chunk.chunk_id] = (raw, hit["run_id"], hit["model"])
        else:
            todo.append(chunk)

    skipped: dict[str, str] = {}
    failed: dict[str, str] = {}
    # call -> (chunk, worst case, prompt estimate)
    running: dict[Future[GenerationResult], tuple[ChunkRecord, int, int]] = {}

    def call(messages: list[dict[str, Any]]) -> GenerationResult:
        return client.generate(
            messages,
            schema=RawExtraction,
            purpose="graph_extraction",
            run_id=run_id,
            tolerant=tolerant,
            max_tokens=budget.max_output_tokens,
        )

    def collect(futures: Iterable[Future[GenerationResult]]) -> None:
        for fut in futures:
            chunk, worst, prompt_estimate = running.pop(fut)
            try:
                result = fut.result()
            except CapabilityNotSupported:
                raise  # a configuration error, not a per-chunk failure
            except ProviderError as exc:
                # a failed call counts: a model that keeps answering garbage is billed for it
                budget.settle(worst, *_billed_on_failure(exc, worst))
                failed[chunk.chunk_id] = type(exc).__name__
                log.warning("extraction failed for %s: %s", chunk.chunk_id, type(exc).__name__)
                continue
            usage = result.usage
            budget.settle(
                worst,
                usage.input_tokens + usage.output_tokens,
                usage.cost,
                prompt_estimate=prompt_estimate,
                prompt_tokens=usage.input_tokens,
            )
            model = usage.reported_model or spec.model.served_model
            parsed = result.parsed
            assert isinstance(parsed, RawExtraction), "generate(schema=RawExtraction) answers a RawExtraction"
            raw_by_chunk[chunk.chunk_id] = (parsed, run_id, model)
            cache.put(
                keys[chunk.chunk_id],
                {
                    "raw": parsed.model_dump(mode="json"),
                    "run_id": run_id,
                    "model": model,
                    "chunk_id": chunk.chunk_id,
                    "prompt_hash": phash,
                    "model_identity": spec.identity,
                },
            )

    size = budget.batch_size
    with ThreadPoolExecutor(max_workers=size) as pool:
        for chunk in todo:  # in chunk order; at most batch_size calls at once
            messages = build_messages(pack.manifest, chunk)
            prompt_estimate = estimate_tokens([str(m["content"]) for m in messages])
            while True:
                if len(running) >= size:
                    collect(wait(running, return_when=FIRST_COMPLETED).done)
                    continue
                worst = budget.worst_case(prompt_estimate)
                reason = budget.start(worst)
                if reason is None:
                    running[pool.submit(call, messages)] = (chunk, worst, prompt_estimate)
                    break
                if running and reason == "max_tokens_per_run":  # running calls may leave room once billed
                    collect(wait(running, return_when=FIRST_COMPLETED).done)
                    continue
                skipped[chunk.chunk_id] = reason
                break
        collect(list(running))
    budget.skipped += len(skipped)
    budget.failures += len(failed)

    records = []
    rejected: Counter[str] = Counter()
    for chunk in chunks:
        if chunk.chunk_id not in raw_by_chunk:
            continue
        raw, origin_run, model = raw_by_chunk[chunk.chunk_id]
        validated = validate(
            raw, chunk, pack.manifest, resolver, engine.cfg.graph, run_id=origin_run, model=model, prompt=phash
        )
        rejected.update(validated.rejected)
        records.append(validated.model_dump(mode="json"))
    budget.rejected.update(rejected)
    # a small status file beside the records: the sensor reads it to continue budget-skipped work
    engine.artifacts.write(pack.name, key, STATUS, {"skipped": len(skipped), "failed": len(failed)})
    engine.artifacts.write(
        pack.name,
        key,
        EXTRACTION,
        {
            "complete": not skipped and not failed,
            "prompt_hash": phash,
            "model_identity": spec.identity,
            "records": records,
            "skipped": skipped,
            "failed": failed,
            "rejected": dict(rejected),
        },
    )
    return {
        "chunks": len(chunks),
        "extracted": len(records),
        "skipped": len(skipped),
        "failed": len(failed),
        "entities": sum(len(r["entities"]) for r in records),
        "relationships": sum(len(r["relationships"]) for r in records),
        "rejected": sum(rejected.values()),
    }


def finish_run(engine: Engine, pack: DomainPack, run_id: str, budget: RunBudget) -> dict[str, Any]:
    """Record the run as an (:ExtractionRun) node and return its summary."""
    spec = engine.registry.extraction
    summary: dict[str, Any] = {
        "run_id": run_id,
        "model": spec.identity,
        "prompt_hash": prompt_hash(pack.manifest),
        "chunks": budget.chunks,
        "cache_hits": budget.cache_hits,
        "tokens": budget.tokens,
        "cost": None if budget.cost is None else format(budget.cost, "f"),
        "status": budget.status(),
        "skipped": budget.skipped,
        "failures": budget.failures,
    }
    writer.write_extraction_run(engine.driver, engine.database, pack=pack.name, **summary)
    return {**summary, "rejected": dict(budget.rejected)}
