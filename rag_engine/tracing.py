"""OpenTelemetry spans of the query path, exported over OTLP (HTTP/protobuf) when configured.

Off by default (``tracing.enabled: false`` in config/engine.yaml): no tracer provider, no exporter,
no thread, and ``span`` returns one shared no-op context manager that yields None, so the query
path pays one function call per stage. On, this module holds its own ``TracerProvider`` (not the
process-global one, so a process can switch it when its engine's config changes) whose batch
processor sends the spans to ``tracing.endpoint`` in the background; a collector that is down
costs the exporter's timeout on its own thread, never a query.

The spans nest through OpenTelemetry's context (a context variable), so a stage run in another
thread nests under the query only if that thread runs in a copy of the caller's context (the
query path's embedding thread does: ``contextvars.copy_context``, as does ``rag serve``'s pool).

A caller's own trace continues through ``incoming``: ``rag serve`` makes an HTTP request's W3C
``traceparent`` current for the request (unless ``tracing.accept_incoming`` is false), so the
query's root span is a child of the caller's span.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from opentelemetry import trace

INSTRUMENTATION = "rag_engine"

_lock = threading.Lock()
_state: dict[str, Any] = {"key": None, "provider": None, "tracer": None, "accept_incoming": False}
TRACE_HEADERS = ("traceparent", "tracestate")
"""The W3C trace context headers ``incoming`` reads."""


def configure(
    *,
    enabled: bool,
    endpoint: str = "",
    service_name: str = "rag-engine",
    sample_ratio: float = 1.0,
    headers: Mapping[str, str] | None = None,
    timeout_seconds: float = 5.0,
    accept_incoming: bool = True,
) -> None:
    """Turn tracing on (a provider exporting to ``endpoint``) or off, for this process. The same
    settings twice keep the provider; others flush and shut the previous one down first.
    ``accept_incoming``: whether ``incoming`` continues a caller's trace."""
    key = (
        enabled,
        endpoint,
        service_name,
        sample_ratio,
        tuple(sorted((headers or {}).items())),
        timeout_seconds,
        accept_incoming,
    )
    with _lock:
        if key == _state["key"]:
            return
        old = _state["provider"]
        provider = tracer = None
        if enabled:  # the SDK and the exporter (protobuf, requests) load only when tracing is on
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import SERVICE_NAME, Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio

            provider = TracerProvider(
                resource=Resource.create({SERVICE_NAME: service_name}),
                sampler=ParentBasedTraceIdRatio(sample_ratio),
            )
            exporter = OTLPSpanExporter(endpoint=endpoint, headers=dict(headers or {}), timeout=timeout_seconds)
            provider.add_span_processor(BatchSpanProcessor(exporter))
            tracer = provider.get_tracer(INSTRUMENTATION)
        _state.update(key=key, provider=provider, tracer=tracer, accept_incoming=enabled and accept_incoming)
    if old is not None:
        old.shutdown()


def flush(timeout_millis: int = 5000) -> bool:
    """Export the spans still queued (tests, shutdown); True when there was nothing to do or all went."""
    provider = _state["provider"]
    return True if provider is None else bool(provider.force_flush(timeout_millis))


_OFF: AbstractContextManager[None] = nullcontext(None)  # reusable: what every span is when tracing is off


def span(
    name: str, facts: Mapping[str, Any] | None = None, **attributes: str | int | float | bool
) -> AbstractContextManager[trace.Span | None]:
    """A span named ``name``, current for the block (a child of the current one); None when off
    (one shared no-op context, nothing allocated). ``facts``: a step's trace entry, read when the
    block ends: its numbers and booleans (hits, weights, counts) become attributes; its text does
    not (it may quote the question). An exception leaving the block is recorded on the span and
    its status set to error."""
    tracer = _state["tracer"]
    if tracer is None:
        return _OFF
    return _recording(tracer, name, facts, attributes)


@contextmanager
def _recording(
    tracer: trace.Tracer, name: str, facts: Mapping[str, Any] | None, attributes: dict[str, str | int | float | bool]
) -> Iterator[trace.Span]:
    with tracer.start_as_current_span(name, attributes=attributes) as current:
        try:
            yield current
        finally:
            for key, value in (facts or {}).items():
                if isinstance(value, int | float | bool):
                    current.set_attribute(f"rag.{key}", value)


def incoming(headers: Mapping[str, str]) -> AbstractContextManager[None]:
    """The caller's W3C trace context (``TRACE_HEADERS`` in ``headers``, lowercase names) current
    for the block, so the spans started in it (and in threads running a copy of its context)
    continue the caller's trace. A no-op (the shared one) when tracing is off, when
    ``accept_incoming`` is false, or without a ``traceparent``; a malformed one is ignored by the
    propagator, and the query starts a trace of its own."""
    if not _state["accept_incoming"] or "traceparent" not in headers:
        return _OFF
    return _continued(headers)


@contextmanager
def _continued(headers: Mapping[str, str]) -> Iterator[None]:
    from opentelemetry import context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    token = context.attach(TraceContextTextMapPropagator().extract(dict(headers)))
    try:
        yield None
    finally:
        context.detach(token)


def trace_id() -> str | None:
    """The current trace's id as 32 hex digits (W3C trace context), or None outside a sampled span."""
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid and ctx.trace_flags.sampled else None
