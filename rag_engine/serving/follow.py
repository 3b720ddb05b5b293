"""The query service follows the active vector index through a blue/green re-index.

`rag reindex` to another embedder switches the store's active index while the service runs. A
question embedded with the service's configured embedder would then be compared in another
embedder's space, which the store refuses (``EmbedderMismatch``). Instead, each question runs on
the engine whose embedder built the active index:

- the configured embedder built it: the service's own engine;
- another embedding model of the config built it (``models``, role embedding, its provider
  usable): an engine with that model as ``defaults.embedding_model``, over the same store,
  ledger and audit trail (``Engine.sibling``), built once;
- no configured model built it: an engine with the dense leg's weight at 0, so the question is
  answered from the lexical, exact, graph and live legs, and the result carries an
  ``index_embedder_unavailable`` event; ``/v1/health`` says ``degraded`` and why.

The active index is read with the store's index epoch (``epochs.current_index``, cached per
epoch), at most every ``RECHECK_SECONDS``; a question that still meets the switch
(``EmbedderMismatch``) re-reads it and runs once more on the right engine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from rag_engine.engine import Engine
from rag_engine.errors import EmbedderMismatch, RagError
from rag_engine.providers.registry import ProviderRegistry
from rag_engine.retrieval.candidates import RetrievalResult
from rag_engine.retrieval.outcome import QueryOutcome
from rag_engine.store.epochs import current_index
from rag_engine.store.session import read_transaction

T = TypeVar("T")
RECHECK_SECONDS = 1.0
UNAVAILABLE = "index_embedder_unavailable"


class IndexFollower:
    def __init__(self, engine: Engine, clock: Callable[[], float] = time.monotonic):
        self.base, self.clock = engine, clock
        self._lock = threading.Lock()
        self._engines: dict[str, Engine] = {engine.embedder_identity: engine}
        self._models: dict[str, str] | None = None
        self._lexical: Engine | None = None
        self._checked_at = -RECHECK_SECONDS
        self._active: str | None = None

    def _configured(self) -> dict[str, str]:
        """identity -> model name, for every embedding model this config could query with."""
        if self._models is None:
            found: dict[str, str] = {}
            cfg = self.base.cfg
            for model in cfg.models:
                if model.role != "embedding":
                    continue
                other = cfg.model_copy(
                    update={"defaults": cfg.defaults.model_copy(update={"embedding_model": model.name})}
                )
                try:
                    found.setdefault(ProviderRegistry(other, self.base.env).embedding.identity, model.name)
                except (RagError, ValueError):  # its provider is disabled or has no endpoint here
                    continue
            self._models = found
        return self._models

    def active_identity(self, *, fresh: bool = False) -> str | None:
        """The identity of the embedder that built the active index (None: no index yet)."""
        now = self.clock()
        if not fresh and now - self._checked_at < RECHECK_SECONDS:
            return self._active
        try:
            with read_transaction(self.base.driver, self.base.database, packs=self.base.packs) as rx:
                active: str | None = current_index(rx)[0].identity
        except EmbedderMismatch:  # no index yet: the engine says so on the question itself
            active = None
        with self._lock:
            self._active, self._checked_at = active, now
        return active

    def engine(self, *, fresh: bool = False) -> tuple[Engine, dict[str, str] | None]:
        """(the engine for the active index, the degraded event to report or None)."""
        active = self.active_identity(fresh=fresh)
        if active is None or active == self.base.embedder_identity:
            return self.base, None
        with self._lock:
            if active in self._engines:
                return self._engines[active], None
            name = self._configured().get(active)
            if name is not None:
                cfg = self.base.cfg
                defaults = cfg.defaults.model_copy(update={"embedding_model": name})
                self._engines[active] = self.base.sibling(cfg.model_copy(update={"defaults": defaults}))
                return self._engines[active], None
            if self._lexical is None:
                retrieval = self.base.cfg.retrieval
                weights = {**retrieval.weights, "dense": 0.0}
                cfg = self.base.cfg.model_copy(update={"retrieval": retrieval.model_copy(update={"weights": weights})})
                self._lexical = self.base.sibling(cfg)
            event = {
                "event": UNAVAILABLE,
                "detail": (
                    f"the active index was built with {active!r}, which no configured embedding model "
                    "provides: answered without the dense leg"
                ),
            }
            return self._lexical, event

    def run(self, fn: Callable[[Engine], T]) -> tuple[T, dict[str, str] | None]:
        """``fn`` on the engine for the active index; once more, on a fresh reading, if the index
        switched under it."""
        engine, event = self.engine()
        try:
            return fn(engine), event
        except EmbedderMismatch:
            engine, event = self.engine(fresh=True)
            return fn(engine), event

    def health(self) -> str:
        """``ok``, ``ok (following <identity>)`` or ``degraded (...)``, from a fresh reading."""
        try:
            active = self.active_identity(fresh=True)
        except Exception as exc:  # noqa: BLE001 - health reports any failure as its type
            return f"unavailable ({type(exc).__name__})"
        if active is None or active == self.base.embedder_identity:
            return "ok"
        if active in self._configured():
            return f"ok (following {active})"
        return f"degraded (active index built with {active}, not configured here: no dense leg)"


def retrieve_on(follower: IndexFollower, fn: Callable[[Engine], RetrievalResult]) -> RetrievalResult:
    """A retrieval on the active index's engine, with its degraded event if there is one."""
    result, event = follower.run(fn)
    if event is not None:
        result.events.append(event)
    return result


def query_on(follower: IndexFollower, fn: Callable[[Engine], QueryOutcome]) -> QueryOutcome:
    """A query on the active index's engine, with its degraded event if there is one."""
    outcome, event = follower.run(fn)
    if event is None:
        return outcome
    outcome.retrieval.events.append(event)
    return outcome.model_copy(update={"events": (*outcome.events, event)})
