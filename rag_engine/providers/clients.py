"""ModelClient: the one way the engine calls a model, whatever answers.

Order of a call: capability check (before any I/O, so a misconfigured request never costs a
cent), backend call (HTTP with retries, cassette, or local hash), output parsing, then exactly
one usage record, written for failed calls too, priced by the pricing file or, for a provider on
our own machine, by its ``local_cost`` (machine time). ``build_client`` picks the backend from the
provider kind.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from rag_engine.config import EngineConfig, LocalCostConfig, under_root
from rag_engine.errors import (
    CapabilityNotSupported,
    ConfigError,
    ContextLimitExceeded,
    MissingCredential,
    ProviderError,
    ProviderResponseInvalid,
    ReplayMiss,
)
from rag_engine.providers.ledger import UsageLedger
from rag_engine.providers.pricing import PriceTable, local_compute, local_cost_for
from rag_engine.providers.ratelimit import RateLimiter, estimate_tokens, limiter_for
from rag_engine.providers.registry import ModelSpec, credential_present, resolve_endpoint
from rag_engine.providers.results import (
    Backend,
    Completion,
    EmbeddingResult,
    Embeddings,
    GenerationResult,
    RerankResult,
    Scores,
    TokenUsage,
)
from rag_engine.providers.vectors import check_vectors
from rag_engine.usage import UsageRecord, current_actor, current_run, tally
from rag_engine.usage import notify as usage_listeners

log = logging.getLogger(__name__)

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


def _json_candidates(text: str) -> list[str]:
    """Where JSON may hide in plain model text: the whole text, a fenced block, the outer braces."""
    out = [text]
    out += [m.group(1) for m in _FENCE.finditer(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        out.append(text[start : end + 1])
    return out


def parse_output(text: str, schema: type[BaseModel], *, tolerant: bool) -> BaseModel:
    """Validate model output against ``schema``; with ``tolerant``, dig JSON out of surrounding prose."""
    candidates = _json_candidates(text) if tolerant else [text]
    errors = 0
    for candidate in candidates:
        try:
            return schema.model_validate_json(candidate)
        except ValidationError as exc:
            errors = exc.error_count()
    # The output itself is not quoted: it may repeat customer text from the prompt.
    raise ProviderResponseInvalid(
        f"model output does not match schema {schema.__name__} ({errors} validation error(s), {len(text)} chars)"
    )


@dataclass
class _Call:
    """What a metered call's block hands back: the provider's answer, then its usage record."""

    answer: Completion | Embeddings | Scores | None = None
    record: UsageRecord | None = None

    @property
    def usage(self) -> UsageRecord:
        if self.record is None:  # only read after the block ended without an error
            raise RuntimeError("a metered call's usage record was read before the call ended")
        return self.record


class ModelClient:
    """Capability-checked, metered access to one configured model."""

    def __init__(
        self,
        spec: ModelSpec,
        backend: Backend,
        *,
        ledger: UsageLedger | None = None,
        pricing: PriceTable | None = None,
    ):
        self.spec = spec
        self._backend = backend
        self._ledger = ledger
        self._pricing = pricing

    def __repr__(self) -> str:
        return f"ModelClient({self.spec.identity}, backend={self._backend!r})"

    # -- public API -------------------------------------------------------------------
    def preload(self) -> None:
        """Load now what the first call would (an SDK import), without calling the model: for a
        long-running process at start, so its first request does not pay for it. (Not
        ``prepare``: a question embedder's ``prepare`` checks it against the server.)"""
        preload = getattr(self._backend, "preload", None)
        if preload is not None:
            preload()

    def generate(
        self,
        messages: list[dict[str, Any]],
        *,
        schema: type[BaseModel] | None = None,
        purpose: str,
        run_id: str | None = None,
        max_tokens: int | None = None,
        tolerant: bool = False,
        timeout_s: float | None = None,
    ) -> GenerationResult:
        """Generate text, or an instance of ``schema``.

        ``tolerant`` lets a model without structured output answer a schema request in plain
        text, from which the JSON is extracted; without it such a request is refused up front.
        ``timeout_s`` caps this call's time, never beyond the provider's ``timeout_s`` (None: the
        provider's). A request whose
        prompt (estimated) plus ``max_tokens`` exceeds the model's ``context_limit`` is refused
        before any I/O (``ContextLimitExceeded``).
        """
        self.spec.require("generation")
        if schema is not None and not tolerant:
            self.spec.require("structured_output")
        self._check_context(messages, max_tokens)
        structured = schema is not None and self.spec.supports("structured_output")
        with self._metered(purpose, run_id) as call:
            completion = call.answer = self._backend.complete(
                messages, schema=schema, structured=structured, max_tokens=max_tokens, timeout_s=self._cap(timeout_s)
            )
            # a completion that fails to parse was still paid for: its record keeps the tokens
            parsed = parse_output(completion.text, schema, tolerant=tolerant) if schema is not None else None
        return GenerationResult(text=completion.text, parsed=parsed, usage=call.usage)

    def _cap(self, timeout_s: float | None) -> float | None:
        """A call's time cap, never longer than the provider's own timeout: a question's budget
        shortens a call, it never lengthens one the operator configured shorter."""
        return None if timeout_s is None else min(timeout_s, self.spec.provider.timeout_s)

    def _check_context(self, messages: list[dict[str, Any]], max_tokens: int | None) -> None:
        limit = self.spec.model.context_limit
        prompt = estimate_tokens([str(m.get("content", "")) for m in messages])
        if prompt + (max_tokens or 0) > limit:
            raise ContextLimitExceeded(
                f"model {self.spec.model.name!r} declares context_limit {limit} tokens; this request needs "
                f"about {prompt} (prompt, characters / 4) + {max_tokens or 0} (max_tokens): not sent"
            )

    def rerank(
        self,
        query: str,
        documents: list[str],
        *,
        purpose: str,
        run_id: str | None = None,
        timeout_s: float | None = None,
    ) -> RerankResult:
        """One relevance score per document from a rerank endpoint (``llama_cpp``'s ``/rerank``),
        metered like every call. Needs the ``rerank`` capability and a backend that scores."""
        self.spec.require("rerank")
        scorer = getattr(self._backend, "rerank", None)
        if scorer is None:
            raise CapabilityNotSupported(
                f"provider {self.spec.provider.name!r} ({self.spec.provider.kind}) has no rerank endpoint; "
                "use provider kind llama_cpp, or the chat-prompt rerank"
            )
        with self._metered(purpose, run_id) as call:
            answer = call.answer = scorer(query, documents, timeout_s=self._cap(timeout_s))
            if len(answer.scores) != len(documents):
                raise ProviderResponseInvalid(f"rerank scored {len(answer.scores)} of {len(documents)} documents")
        return RerankResult(scores=answer.scores, usage=call.usage)

    def embed(self, texts: list[str], *, purpose: str, run_id: str | None = None) -> EmbeddingResult:
        self.spec.require("embeddings")
        with self._metered(purpose, run_id) as call:
            answer = call.answer = self._backend.embed(list(texts), input_mode=self.spec.input_mode(purpose))
            if len(answer.vectors) != len(texts):
                raise ProviderResponseInvalid(
                    f"provider {self._backend.name!r}: expected {len(texts)} embeddings, got {len(answer.vectors)}"
                )
            # whatever answered (server, cassette): a vector that cannot be indexed stops here,
            # before any caller caches, writes or searches with it
            check_vectors(answer.vectors, self.spec.model.dimension, who=f"provider {self._backend.name!r}")
        return EmbeddingResult(vectors=answer.vectors, usage=call.usage)

    # -- metering ---------------------------------------------------------------------
    def _local_cost(self, answer: Completion | Embeddings | Scores | None) -> LocalCostConfig | None:
        """The machine-time rate of this call: the provider's, when this provider answered (a replay
        provider in record mode hands a miss to a live provider, which is not our machine's time)."""
        if answer is not None and answer.provider != self.spec.provider.name:
            return None
        return local_cost_for(self.spec.provider, self.spec.model)

    def _cost(
        self,
        answer: Completion | Embeddings | Scores | None,
        usage: TokenUsage,
        latency_ms: int,
        local: LocalCostConfig | None,
    ) -> Decimal | None:
        if local is not None:  # machine time: the call's seconds, or its tokens at a derived rate
            if local.basis == "tokens" and not usage.known:
                return None
            return local.cost(latency_ms=latency_ms, tokens=usage.input_tokens + usage.output_tokens)
        if isinstance(answer, Embeddings) and not answer.priced:
            return Decimal(0)  # local compute: known to be free
        if answer is None and local_compute(self.spec.provider, self.spec.model):
            return Decimal(0)  # a failed call to a local embedder is as free as an answered one
        if self._pricing is None or not usage.known:
            return None
        from rag_engine.providers.pricing import price_key

        key = price_key(self.spec.model.pricing_ref, self.spec.provider.name, self.spec.model.served_model)
        return self._pricing.price(key, usage.input_tokens, usage.cached_input_tokens, usage.output_tokens)

    @contextmanager
    def _metered(self, purpose: str, run_id: str | None) -> Iterator[_Call]:
        """One metered call: the usage record is written when the block ends, with the error that
        ended it if any (and handed to the caller on a ProviderError: an answer that was refused
        after it arrived was still billed, and budgets charge it). The block sets ``answer``."""
        started = time.perf_counter()
        call = _Call()
        try:
            yield call
        except Exception as exc:
            record = self._write(purpose, run_id, started, answer=call.answer, error=exc)
            if isinstance(exc, ProviderError):
                exc.usage = record
            raise
        call.record = self._write(purpose, run_id, started, answer=call.answer)

    def _write(
        self,
        purpose: str,
        run_id: str | None,
        started: float,
        *,
        answer: Completion | Embeddings | Scores | None,
        error: BaseException | None = None,
    ) -> UsageRecord:
        usage = answer.usage if answer is not None else TokenUsage()
        latency_ms = round((time.perf_counter() - started) * 1000)
        local = self._local_cost(answer)
        version = local.version if local is not None else self._pricing.version if self._pricing is not None else None
        record = UsageRecord(
            run_id=run_id or current_run(),
            actor=current_actor(),
            purpose=purpose,
            provider=answer.provider if answer is not None else self.spec.provider.name,
            requested_model=self.spec.model.served_model,
            reported_model=answer.reported_model if answer is not None else None,
            input_tokens=usage.input_tokens,
            cached_input_tokens=usage.cached_input_tokens,
            output_tokens=usage.output_tokens,
            reasoning_tokens=usage.reasoning_tokens,
            estimated=usage.estimate is not None,
            latency_ms=latency_ms,
            status="ok" if error is None else "error",
            error_type=type(error).__name__ if error is not None else None,
            pricing_version=version,
            # a replay miss ran nothing (the cassette holds no answer): it costs nothing, known
            cost=Decimal(0) if isinstance(error, ReplayMiss) else self._cost(answer, usage, latency_ms, local),
        )
        if self._ledger is not None:
            try:
                record = self._ledger.record(record)
            except Exception as exc:  # noqa: BLE001 - a ledger failure must not fail the model call; logged below
                # the record itself holds no secret; it is logged so it can be replayed into the ledger
                log.error(
                    "usage ledger write failed (%s); record kept in this log: %s",
                    type(exc).__name__,
                    record.model_dump_json(),
                )
        usage_listeners(record)
        tally(record)
        log.debug(
            "model call %s purpose=%s status=%s latency_ms=%d tokens=%d/%d",
            self.spec.identity,
            purpose,
            record.status,
            record.latency_ms,
            record.input_tokens,
            record.output_tokens,
        )
        return record


# -- backends that need no HTTP ------------------------------------------------------------


class HashEmbedBackend:
    """The built-in feature-hashing embedder: local compute, no tokens billed."""

    def __init__(self, spec: ModelSpec):
        from rag_engine.providers.embedders import HashEmbedder  # imported lazily: only this kind needs it

        self._spec = spec
        self._embedder = HashEmbedder(spec)

    def __repr__(self) -> str:
        return f"HashEmbedBackend({self._spec.identity})"

    @property
    def name(self) -> str:
        return self._spec.provider.name

    def complete(self, messages: list[dict[str, Any]], **_: Any) -> Completion:
        raise CapabilityNotSupported(f"provider {self.name!r} (local_hash) only embeds")

    def embed(self, texts: list[str], *, input_mode: str | None = None) -> Embeddings:
        # symmetric: one space for questions and passages, the mode is ignored
        vectors = [[float(x) for x in v] for v in self._embedder.embed(list(texts))]
        return Embeddings(
            vectors=vectors,
            reported_model=self._spec.model.served_model,
            usage=TokenUsage(),
            provider=self.name,
            priced=False,
        )


# -- construction ----------------------------------------------------------------------------


def _api_key(spec: ModelSpec, env: Mapping[str, str]) -> str | None:
    """Read the key from the env var the config names; only the name ever appears in errors."""
    name = spec.provider.credential_env
    if name is None:
        if spec.provider.kind == "openai":
            raise ConfigError(f"provider {spec.provider.name!r} (openai) has no credential_env")
        return None
    value = env.get(name)
    if not value or not credential_present(env, name):
        raise MissingCredential(f"provider {spec.provider.name!r} needs environment variable {name}, which is not set")
    return value


def _backend(
    spec: ModelSpec,
    *,
    env: Mapping[str, str],
    root: Path,
    config: EngineConfig | None,
    limiter: RateLimiter | None,
) -> Backend:
    kind = spec.provider.kind
    if kind in ("openai", "openai_compatible"):
        from rag_engine.providers.openai_backend import OpenAIBackend

        return OpenAIBackend(
            spec,
            api_key=_api_key(spec, env),
            limiter=limiter or limiter_for(spec.provider),
            base_url=resolve_endpoint(spec.provider, env),
        )
    if kind == "local_hash":
        return HashEmbedBackend(spec)
    if kind == "llama_cpp":
        from rag_engine.providers.llama_cpp import LlamaCppBackend

        return LlamaCppBackend(spec, base_url=resolve_endpoint(spec.provider, env))
    if kind == "replay":
        from rag_engine.providers.replay import Cassette, ReplayBackend

        if not spec.provider.cassette:
            raise ConfigError(f"replay provider {spec.provider.name!r} has no cassette path")
        cassette = Cassette(under_root(root, spec.provider.cassette))
        live = None
        if spec.provider.record:
            live = _backend(_record_spec(spec, config), env=env, root=root, config=config, limiter=limiter)
        return ReplayBackend(spec, cassette, live=live)
    raise ConfigError(f"unknown provider kind {kind!r}")  # pragma: no cover - config validation forbids it


def _record_spec(spec: ModelSpec, config: EngineConfig | None) -> ModelSpec:
    name = spec.provider.record_provider
    if not name:
        raise ConfigError(f"replay provider {spec.provider.name!r} has record: true but no record_provider")
    if config is None:
        raise ConfigError("record mode needs the engine config to find record_provider; pass config=")
    live = config.provider(name)
    if live is None or live.kind == "replay":
        raise ConfigError(f"record_provider {name!r} of {spec.provider.name!r} is not a live provider")
    return ModelSpec(model=spec.model, provider=live)


def build_client(
    spec: ModelSpec,
    *,
    ledger: UsageLedger | None = None,
    pricing: PriceTable | None = None,
    env: Mapping[str, str] = os.environ,
    root: Path,
    config: EngineConfig | None = None,
    limiter: RateLimiter | None = None,
) -> ModelClient:
    """A client for ``spec``; ``config`` is needed only by replay providers in record mode."""
    backend = _backend(spec, env=env, root=Path(root), config=config, limiter=limiter)
    return ModelClient(spec, backend, ledger=ledger, pricing=pricing)


def client_from_config(
    cfg: EngineConfig,
    model_name: str,
    *,
    root: Path,
    env: Mapping[str, str] = os.environ,
    ledger: UsageLedger | None = None,
    pricing: PriceTable | None = None,
) -> ModelClient:
    """A metered client for a configured model: the ledger and pricing the config names, unless given.

    For the CLI and Dagster resources; build once and reuse (each call opens the ledger: a SQLite file's
    connection, or a SQLAlchemy pool).
    """
    from rag_engine.providers.ledger import ledger_url
    from rag_engine.providers.pricing import pricing_for
    from rag_engine.providers.registry import ProviderRegistry

    spec = ProviderRegistry(cfg, env).spec(model_name)
    ledger = ledger if ledger is not None else UsageLedger(ledger_url(cfg, env, root))
    pricing = pricing if pricing is not None else pricing_for(cfg, root)
    return build_client(spec, ledger=ledger, pricing=pricing, env=env, root=root, config=cfg)
