"""The retriever contract: one small interface every retrieval leg implements, a registry of legs
by name, and the question state the legs read and fill.

A leg is one way of finding passages for a question (exact references, fulltext, vector, live SQL
sources, the graph). Each is a class registered by name (``@register_leg("lexical")``); the legs a
question runs, and their order, come from ``retrieval.legs`` in the config, so a new leg is a new
class plus config, never an edit of ``retrieve()``. Fusion, rerank and expansion are stages over
the legs' rows (``fusion_stage``, ``rerank_stage``, ``expansion``).

Shaped after neo4j-graphrag-python's ``Retriever.search()`` (one public method over the store,
stamped with the retriever's name) and Haystack's retrievers feeding a ``DocumentJoiner`` (each
returns a ranked list; a joiner fuses them by rank), with what this engine adds: every leg shares
the question's read transaction and trace, and may start work (a model call) before it.

A leg's life for one question:

- ``start(q)``: before the read transaction (work that runs in a thread beside the store, such as
  the question's embedding); ``cancel()`` drops it if the store fails;
- ``search(q, t)``: in the read transaction (``q.rx``), under its trace step ``t`` (a dict the
  leg fills: hits, degraded, ...); returns its rows, best first (store rows: ``chunk_id``,
  ``anchor``, ``doc_id``, ``heading``, ``text``, ``collection``, ...);
- ``finish(q)``: after every leg searched, before fusion: the rows fusion ranks (a leg whose order
  depends on another leg's rows, such as exact hits ranked by their lexical rank, settles here).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from rag_engine import tracing
from rag_engine.errors import ConfigError

if TYPE_CHECKING:
    from rag_engine.store.session import Reads


class Trace:
    """The steps of one question, each with its timing (``ms``) and what it found. A step inside
    the question's read transaction (``store`` set) also has ``store_ms``: the part of its time
    it waited on Neo4j statements (``Reads.store_ms``; work done while a statement it sent runs,
    as the rerank stage's units' split, is not in it). The rest is spent outside them: the
    engine's work in Python, and waits on anything else (the question's embedding in ``dense``,
    live SQL sources in ``live``)."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.store: Reads | None = None

    @contextmanager
    def step(self, name: str, **info: Any) -> Iterator[dict[str, Any]]:
        entry: dict[str, Any] = {"step": name, **info}
        store = self.store
        in_store = store.store_ms if store is not None else 0.0
        started = time.perf_counter()
        try:
            # one OpenTelemetry span per step (when on); it reads the entry as it closes, after
            # ``ms`` and ``store_ms`` are set, so both become attributes (``rag.ms``, ``rag.store_ms``)
            with tracing.span(f"rag.{name}", facts=entry):
                try:
                    yield entry
                finally:
                    entry["ms"] = round((time.perf_counter() - started) * 1000, 2)
                    if store is not None:
                        entry["store_ms"] = round(store.store_ms - in_store, 2)
        finally:
            self.steps.append(entry)


@dataclass
class References:
    """What the question names: reference keys (``pack|key``), the rows answering them, and
    whether the question is a lookup (little more than its reference). Set by the exact leg."""

    keys: list[str] = field(default_factory=list)
    key_rows: list[dict[str, Any]] = field(default_factory=list)
    docs_by_key: dict[str, list[str]] = field(default_factory=dict)
    lookup: bool = False
    exact_ids: set[str] = field(default_factory=set)
    phrase_ids: set[str] = field(default_factory=set)
    ambiguous: list[str] = field(default_factory=list)
    ambiguous_docs: set[str] = field(default_factory=set)


@dataclass
class Question:
    """What a leg needs from the question, and what the legs leave for each other and for the
    stages after them. One per ``retrieve`` call; ``rx`` is set inside the read transaction."""

    engine: Any
    """The ``rag_engine.engine.Engine`` (config, embedder, packs, store)."""
    text: str
    k: int
    collections: tuple[str, ...]
    packs: list[Any]
    weights: dict[str, float]
    trace: Trace
    events: list[dict[str, Any]]
    """The result's events (governance, ``dense_degraded``, live source events, ...), in order."""
    rx: Any = None
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Each leg's rows by leg name, in the order the legs ran: what fusion ranks."""
    refs: References = field(default_factory=References)
    query_vec: list[float] | None = None
    """The question's embedding (None when the dense leg is off, degraded or the vector is zero)."""
    plan: dict[str, Any] | None = None
    """The planner's decision (set by the graph leg)."""
    shared: dict[str, Any] = field(default_factory=dict)
    """What one leg hands another within the question (the embedding started before the store,
    the vector rows read in the fulltext leg's round trip, the live rows' vectors)."""
    named: set[str] = field(default_factory=set)
    """Documents (``pack:doc_id``) the question names as a whole (set by fusion)."""
    titles: dict[str, str] = field(default_factory=dict)
    """``pack:doc_id`` -> title, read once per question (rerank, then the result)."""

    def weight(self, leg: str) -> float:
        """The leg's fusion weight (configured, overridden per call; 1.0 for a leg left out)."""
        return self.weights.get(leg, 1.0)


class Leg:
    """One retrieval leg (module docstring). Subclasses set ``name`` (by ``register_leg``) and
    implement ``search``; ``step`` and ``trace_info`` name and describe its trace step."""

    name: ClassVar[str] = ""
    step: ClassVar[str] = ""
    """The leg's trace step (default: its name)."""

    def trace_info(self, q: Question) -> dict[str, Any]:
        """What the leg's trace step says before it runs (its weight, its bounds)."""
        return {"weight": q.weight(self.name)}

    def start(self, q: Question) -> None:
        """Before the read transaction: start work that runs beside the store (default: none)."""

    def cancel(self) -> None:
        """The store failed: drop work started by ``start`` that has not begun (default: none)."""

    def run(self, q: Question) -> None:
        """``search`` under the leg's trace step, its rows kept as ``q.rows[name]``."""
        with q.trace.step(self.step or self.name, **self.trace_info(q)) as t:
            q.rows[self.name] = self.search(q, t)

    def search(self, q: Question, t: dict[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def finish(self, q: Question) -> list[dict[str, Any]]:
        """The rows fusion ranks for this leg (default: what ``search`` returned)."""
        return q.rows.get(self.name, [])


_LEGS: dict[str, type[Leg]] = {}


def register_leg(name: str) -> Any:
    """Class decorator: the leg class answers to ``name`` in ``retrieval.legs``."""

    def register(cls: type[Leg]) -> type[Leg]:
        if name in _LEGS and _LEGS[name] is not cls:
            raise ConfigError(f"retrieval leg {name!r} is registered twice ({_LEGS[name].__name__}, {cls.__name__})")
        cls.name = name
        _LEGS[name] = cls
        return cls

    return register


def build_legs(names: list[str] | tuple[str, ...]) -> list[Leg]:
    """One fresh leg object per configured name, in order; an unknown name is a clear config error."""
    unknown = [n for n in names if n not in _LEGS]
    if unknown:
        raise ConfigError(f"unknown retrieval legs {unknown} in retrieval.legs; registered: {sorted(_LEGS)}")
    return [_LEGS[n]() for n in names]
