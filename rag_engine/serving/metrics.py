"""What the query service exposes to Prometheus at ``GET /metrics`` (``prometheus_client``).

One registry per process (``REGISTRY``; `rag serve` is one uvicorn process): requests by route,
method, status and principal (its id, never a key; ``-`` before a key was checked), latency
histograms by route, requests in flight, the engine pool's busy workers against its size, the
events of each query (``dense_degraded`` and the other degraded legs, ``generation_fallback``,
``collections_blocked``), and the model calls the process made, with their tokens and known cost
by model and principal. 429, 503 and 504 are the ``status`` label of the request counter.

Labels stay bounded: a route is one of the service's own paths (anything else is ``other``), a
principal one of those configured, an event or model one the engine names. Who may read it: a
principal holding ``serving.operator_role`` (``GET /metrics`` with its key; the principals' names
and traffic are not for every caller). Prometheus sends the key with ``authorization:
credentials_file`` in its scrape config (docs/cli.md, `rag serve`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rag_engine import usage
from rag_engine.usage import UsageRecord

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)  # resident memory, CPU seconds, open descriptors (Linux)

ROUTES = frozenset(
    {
        "/v1/retrieve",
        "/v1/query",
        "/v1/query/stream",
        "/v1/passage",
        "/v1/collections",
        "/v1/health",
        "/mcp",
        "/metrics",
        "/docs",
        "/openapi.json",
    }
)
ANONYMOUS = "-"
"""The principal label of a request refused before its key was checked (or of a public path)."""

REQUESTS = Counter(
    "rag_http_requests",
    "HTTP requests answered, by route, method, status and principal (its id; '-' before a key was checked)",
    ("route", "method", "status", "principal"),
    registry=REGISTRY,
)
LATENCY = Histogram(
    "rag_http_request_duration_seconds",
    "Time from a request's arrival to the end of its response, by route",
    ("route", "method"),
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
    registry=REGISTRY,
)
IN_FLIGHT = Gauge("rag_http_requests_in_flight", "HTTP requests being answered now", registry=REGISTRY)
POOL_BUSY = Gauge("rag_engine_pool_busy", "Engine calls running in the bounded pool now", registry=REGISTRY)
POOL_WORKERS = Gauge("rag_engine_pool_workers", "Size of the bounded pool (serving.limits.workers)", registry=REGISTRY)
QUERY_EVENTS = Counter(
    "rag_query_events",
    "Events of the queries answered (dense_degraded, generation_fallback, collections_blocked, ...)",
    ("event",),
    registry=REGISTRY,
)
MODEL_CALLS = Counter(
    "rag_model_calls",
    "Model calls made by this process, by model, purpose and status",
    ("model", "purpose", "status"),
    registry=REGISTRY,
)
MODEL_TOKENS = Counter(
    "rag_model_tokens", "Tokens of the model calls, by model and direction", ("model", "direction"), registry=REGISTRY
)
MODEL_COST = Counter(
    "rag_model_cost_usd",
    "Known cost of the model calls in USD (unpriced calls count in rag_model_unpriced_calls), by model and principal",
    ("model", "principal"),
    registry=REGISTRY,
)
MODEL_UNPRICED = Counter(
    "rag_model_unpriced_calls",
    "Model calls whose cost is unknown (never counted as free)",
    ("model",),
    registry=REGISTRY,
)


def route_of(path: str) -> str:
    """The route label of a path: one of the service's own, ``/static/docs`` for its assets, else ``other``."""
    if path in ROUTES:
        return path
    if path == "/mcp/":
        return "/mcp"
    return "/static/docs" if path.startswith("/static/docs/") else "other"


def observe_events(events: Iterable[Mapping[str, Any]]) -> None:
    """Count a query's events by name (the degraded legs among them)."""
    for event in events:
        name = event.get("event")
        if isinstance(name, str) and name:
            QUERY_EVENTS.labels(event=name).inc()


def observe_call(record: UsageRecord) -> None:
    """Count one model call (a ``usage`` listener: every record a client writes in this process)."""
    model = record.requested_model
    MODEL_CALLS.labels(model=model, purpose=record.purpose, status=record.status).inc()
    MODEL_TOKENS.labels(model=model, direction="input").inc(record.input_tokens)
    MODEL_TOKENS.labels(model=model, direction="output").inc(record.output_tokens)
    if record.cost is None:
        MODEL_UNPRICED.labels(model=model).inc()
    else:
        MODEL_COST.labels(model=model, principal=record.actor or ANONYMOUS).inc(float(record.cost))


usage.on_record(observe_call)


def exposition() -> tuple[bytes, str]:
    """The registry in Prometheus' text format, and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


class Metered:
    """ASGI middleware (outermost): counts and times every HTTP request. The principal is read
    after the response, from the request state ``serving.door`` fills once the key is checked."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route, method = route_of(scope.get("path", "")), scope.get("method", "GET")
        status = 500  # an exception before the response started ends as the server's 500
        started = time.perf_counter()

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        IN_FLIGHT.inc()
        try:
            await self.app(scope, receive, sending)
        finally:
            IN_FLIGHT.dec()
            principal = (scope.get("state") or {}).get("principal")
            who = getattr(principal, "id", None) or ANONYMOUS
            REQUESTS.labels(route=route, method=method, status=str(status), principal=who).inc()
            LATENCY.labels(route=route, method=method).observe(time.perf_counter() - started)
