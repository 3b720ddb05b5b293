"""The caller's trace continued: an HTTP request's W3C trace context (``traceparent``,
``tracestate``) made current for the request (``tracing.incoming``), so the query it asks for,
which runs in ``EnginePool``'s workers in a copy of the request's context, starts its spans as
children of the caller's span. Nothing happens with tracing off or ``tracing.accept_incoming``
false, or without a ``traceparent``."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from rag_engine import tracing

_WANTED = {name.encode("latin-1"): name for name in tracing.TRACE_HEADERS}


class IncomingTrace:
    """ASGI middleware: HTTP requests only (``traceparent`` is an HTTP header); the headers read
    are the two of ``tracing.TRACE_HEADERS``, nothing else of the request."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {
            _WANTED[name.lower()]: value.decode("latin-1")
            for name, value in scope.get("headers", ())
            if name.lower() in _WANTED
        }
        with tracing.incoming(headers):
            await self.app(scope, receive, send)
