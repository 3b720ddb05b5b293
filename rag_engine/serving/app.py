"""The query service: ``POST /v1/retrieve``, ``POST /v1/query``, ``GET /v1/health`` (FastAPI).

A request's role comes from its key, never from the caller alone: ``Authorization: Bearer <key>``
is checked against the principals' key digests (``governance.principals``) before anything else
runs, so a request without a valid key gets 401 without touching the store; the role it asks
for must be one its principal holds (403 otherwise), and the principal's id is the ``actor`` of
the query's audit records. Responses are the shapes `rag query --json` prints: ``RetrievalResult``
for retrieve, ``QueryOutcome`` for query. Typed engine errors become one-line JSON bodies: bad
input 400 or 422, an unknown role 403, a body over the limit 413, a principal over its rate or
concurrency 429 with ``Retry-After``, the store unreachable 503, a request over its timeout 504.
Engine calls run in the bounded pool of ``serving.limits`` (the query path is blocking), so the
event loop keeps serving health checks meanwhile. The MCP server (``serving.mcp_server``) is
mounted at ``/mcp`` behind the same keys and limits. On SIGTERM uvicorn stops accepting and
waits ``shutdown_grace_seconds`` for requests in flight; the pool then finishes its calls; a
request arriving on an open connection meanwhile is 503 (``serving.connections``). ``GET
/metrics`` is Prometheus' view of all of it, for an operator's key (``serving.metrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send
from swagger_ui_bundle import swagger_ui_path  # type: ignore[import-untyped]

from rag_engine import package_version
from rag_engine.engine import Engine
from rag_engine.errors import (
    Forbidden,
    NotIngested,
    PolicyError,
    QueryInputError,
    RagError,
    RateLimited,
    RequestTimeout,
    RequestTooLarge,
    StoreUnavailable,
    Unauthenticated,
)
from rag_engine.governance.audit import AuditRecord, audit_trail
from rag_engine.governance.principals import Principal, PrincipalRegistry
from rag_engine.retrieval.candidates import RetrievalResult
from rag_engine.retrieval.conversation import Turn
from rag_engine.retrieval.outcome import QueryOutcome
from rag_engine.serving import calls
from rag_engine.serving.connections import DRAIN_SECONDS, ConnectionGuard, descriptor_budget, guarded_protocol
from rag_engine.serving.door import MCP_PATHS, Door
from rag_engine.serving.follow import IndexFollower, query_on, retrieve_on
from rag_engine.serving.limits import EnginePool, bounded
from rag_engine.serving.logs import PATH_ONLY
from rag_engine.serving.mcp_server import build_mcp
from rag_engine.serving.metrics import Metered, exposition
from rag_engine.serving.shared_limits import limiter_for
from rag_engine.serving.trace_context import IncomingTrace
from rag_engine.serving.wire import bearer, first_line
from rag_engine.store.connection import store_gone

__version__ = package_version()

STATUS: tuple[tuple[type[RagError], int], ...] = (
    (Unauthenticated, 401),
    (Forbidden, 403),
    (PolicyError, 403),
    (QueryInputError, 400),
    (NotIngested, 409),
    (RequestTooLarge, 413),
    (RateLimited, 429),
    (StoreUnavailable, 503),
    (RequestTimeout, 504),
)
"""Typed engine errors and their HTTP status, most specific first; any other RagError is 500."""
DOCS_ASSETS = "/static/docs"
"""Where the Swagger UI's assets are served from (``swagger_ui_bundle``, a pinned package)."""
HTTP_ERRORS = {400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed"}


class RetrieveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    """Strict: ``"k": true`` or ``"k": "5"`` is 422, never read as 1 or 5."""

    question: str = Field(min_length=1)
    role: str | None = None
    """One of the principal's roles (default: its first)."""
    k: int | None = Field(None, ge=1)
    collections: list[str] | None = Field(None, max_length=64)
    """Collections to read; those the role may not read are blocked (an audit event)."""


class QueryRequest(RetrieveRequest):
    session_id: str | None = None
    generate: bool = True
    """False: the extractive answer (the top passages), no generation call."""
    conversation: list[Turn] | None = None
    """The earlier turns of a chat, oldest first: ``{"role": "user" | "assistant", "content": ...}``
    (422 for another shape; 400 past ``context.max_turns`` or ``context.max_turn_chars``). The
    answer model sees the most recent turns within the ``context.conversation`` budget."""


class PassageRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    chunk_id: str = Field(min_length=1, max_length=512)
    role: str | None = None


class Health(BaseModel):
    status: str
    version: str
    store: str
    index: str
    """``ok``, ``ok (following <embedder>)`` after a re-index to another configured embedder, or
    ``degraded (...)``: the active index's embedder is not configured here (no dense leg)."""
    workers_busy: int


def sse(event: str, data: str) -> str:
    """One server-sent event (the JSON data holds no newline)."""
    return f"event: {event}\ndata: {data}\n\n"


def error_body(status: int, exc: Exception, headers: dict[str, str] | None = None) -> JSONResponse:
    """One line: the error's type and the first line of its message."""
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    return JSONResponse({"error": type(exc).__name__, "detail": first_line(exc)}, status, headers=headers)


def status_of(exc: RagError) -> int:
    return next((code for kind, code in STATUS if isinstance(exc, kind)), 500)


def rag_error(exc: RagError) -> JSONResponse:
    headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, RateLimited) else None
    return error_body(status_of(exc), exc, headers)


def mcp_only(mcp_app: ASGIApp) -> ASGIApp:
    """The MCP app for its own path; any other path the routes did not answer is a one-line 404."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") not in MCP_PATHS:
            await JSONResponse({"error": "NotFound", "detail": "no such route"}, 404)(scope, receive, send)
            return
        await mcp_app(scope, receive, send)

    return app


def current_principal(request: Request, authorization: Annotated[str | None, Header()] = None) -> Principal:
    """The principal of the request's key (``Unauthenticated`` -> 401 before anything else runs)."""
    door: Principal | None = getattr(request.state, "principal", None)  # serving.door checked the key
    if door is not None:
        return door
    registry: PrincipalRegistry = request.app.state.principals
    return registry.authenticate(bearer(authorization))


Caller = Annotated[Principal, Depends(current_principal)]


def create_app(engine: Engine, registry: PrincipalRegistry | None = None) -> FastAPI:
    principals = registry or PrincipalRegistry(engine.cfg, engine.root, engine.env)
    limits = engine.cfg.serving.limits
    limiter, pool = limiter_for(limits, engine.env), EnginePool(limits)
    follower = IndexFollower(engine)
    mcp = build_mcp(engine, principals, limiter, pool, follower=follower)
    mcp_app = mcp.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True, host=engine.cfg.serving.host
    )

    async def refused(scope: Scope, status: int, error: str, principal: Principal | None) -> None:
        """A refusal on the record: who (when authenticated), what was refused, never a value."""
        record = AuditRecord(
            event="request_refused",
            actor=principal.id if principal else None,
            payload={"status": status, "error": error, "method": scope.get("method"), "path": scope.get("path")},
        )
        try:
            await run_in_threadpool(audit_trail(engine).append, record)
        except Exception as exc:  # noqa: BLE001 - a refusal stays answered when the trail is down
            logging.getLogger(__name__).warning("could not record a refusal (%s)", type(exc).__name__)

    async def refused_here(request: Request, status: int, error: str) -> None:
        await refused(request.scope, status, error, getattr(request.state, "principal", None))

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        logging.getLogger("uvicorn.access").addFilter(PATH_ONLY)
        # questions embedded in process from the first one (if configured), checked aside: startup never waits
        asyncio.get_running_loop().run_in_executor(None, engine.prepare_question_embedder)
        async with mcp.session_manager.run():
            yield
        pool.shutdown()

    app = FastAPI(
        title="RAG engine query service",
        version=__version__,
        description="Retrieval and cited answers over the ingested packs, for an authenticated principal.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.principals = principals
    app.state.pool = pool

    @app.exception_handler(RagError)
    async def _typed(request: Request, exc: RagError) -> JSONResponse:
        response = rag_error(exc)
        if response.status_code < 500 and response.status_code != 409:
            await refused_here(request, response.status_code, type(exc).__name__)
        return response

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        """422 in one line: where and what, never the submitted value."""
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}" for e in exc.errors()
        )
        await refused_here(request, 422, "InvalidRequest")
        return JSONResponse({"error": "InvalidRequest", "detail": problems}, 422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        """FastAPI's own refusals (a body it cannot parse: invalid UTF-8, JSON nested too deep; an
        unknown route) in the one-line shape every other error has."""
        error = HTTP_ERRORS.get(exc.status_code, "HTTPError")
        if exc.status_code == 400:
            await refused_here(request, 400, error)
        return JSONResponse({"error": error, "detail": str(exc.detail)}, exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _untyped(request: Request, exc: Exception) -> JSONResponse:
        """The driver losing the store is 503 in one line; anything else is a bug: 500, its type only."""
        gone = store_gone(exc)
        if gone is not None:
            return error_body(503, gone)
        return JSONResponse({"error": type(exc).__name__, "detail": "internal error"}, 500)

    @app.get("/v1/health")
    async def health() -> Health:
        """Unauthenticated: whether the service runs and the store answers (no query is run)."""

        def store() -> str:
            try:
                engine.driver.verify_connectivity()
            except Exception as exc:  # noqa: BLE001 - health reports any failure as its type
                return f"unavailable ({type(exc).__name__})"
            return "ok"

        state = await run_in_threadpool(store)
        index = await run_in_threadpool(follower.health) if state == "ok" else "unknown"
        return Health(
            status="ok" if state == "ok" and index.startswith("ok") else "degraded",
            version=__version__,
            store=state,
            index=index,
            workers_busy=pool.busy,
        )

    async def run(caller: Principal, fn: Any) -> Any:
        return await bounded(limiter, pool, caller.id, fn)

    @app.post("/v1/retrieve")
    async def retrieve_endpoint(body: RetrieveRequest, caller: Caller) -> RetrievalResult:
        """Ranked candidates with provenance, no answer. Run as a query without generation, so it
        is audited like any other (what was permitted, withheld and returned, and for whom)."""
        result: RetrievalResult = await run(
            caller,
            lambda: retrieve_on(
                follower, lambda eng: calls.retrieve(eng, caller, body.question, body.role, body.k, body.collections)
            ),
        )
        return result

    @app.post("/v1/query")
    async def query_endpoint(body: QueryRequest, caller: Caller) -> QueryOutcome:
        """A cited answer (or "insufficient evidence"), with the candidates and the trace."""
        outcome: QueryOutcome = await run(
            caller,
            lambda: query_on(
                follower,
                lambda eng: calls.query(
                    eng,
                    caller,
                    body.question,
                    body.role,
                    k=body.k,
                    collections=body.collections,
                    session_id=body.session_id,
                    generate=body.generate,
                    conversation=body.conversation,
                ),
            ),
        )
        return outcome

    @app.post(
        "/v1/query/stream",
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {}}, "description": "server-sent events"}},
    )
    async def query_stream_endpoint(body: QueryRequest, caller: Caller) -> StreamingResponse:
        """The query as server-sent events: ``retrieval`` (the ranked candidates, as soon as they
        are known), then ``answer`` (the cited answer) and ``done`` (events, latency), or one
        ``error`` event. Keys, roles and limits are checked before the stream starts, so a refusal
        is a plain 401/403/429, never a stream."""
        role = caller.role(body.role)
        admission = contextlib.ExitStack()
        admission.enter_context(limiter.admit(caller.id))
        loop = asyncio.get_running_loop()
        retrieved: asyncio.Queue[RetrievalResult] = asyncio.Queue()

        def publish(result: RetrievalResult) -> None:
            loop.call_soon_threadsafe(retrieved.put_nowait, result)

        def work() -> QueryOutcome:
            return query_on(
                follower,
                lambda eng: calls.query(
                    eng,
                    caller,
                    body.question,
                    role,
                    k=body.k,
                    collections=body.collections,
                    session_id=body.session_id,
                    generate=body.generate,
                    conversation=body.conversation,
                    on_retrieved=publish,
                ),
            )

        answered = asyncio.ensure_future(pool.run(work))

        async def events() -> AsyncIterator[str]:
            with admission:
                first = asyncio.ensure_future(retrieved.get())
                await asyncio.wait({first, answered}, return_when=asyncio.FIRST_COMPLETED)
                if first.done():
                    yield sse("retrieval", first.result().model_dump_json())
                else:
                    first.cancel()
                try:
                    outcome = await answered
                except Exception as exc:  # noqa: BLE001 - the stream has begun: the error is its last event
                    failure = (
                        exc if isinstance(exc, RagError) else RagError("internal error")
                    )  # the pool types a store loss
                    yield sse("error", json.dumps({"error": type(failure).__name__, "detail": first_line(failure)}))
                    return
                yield sse("answer", outcome.answer.model_dump_json())
                done = {"events": list(outcome.events), "latency_ms": outcome.latency_ms}
                yield sse("done", json.dumps(done, default=str))

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    @app.post("/v1/passage", response_model=calls.Passage, responses={404: {"description": "no readable passage"}})
    async def passage_endpoint(body: PassageRequest, caller: Caller) -> Any:
        """One cited passage's current text, if the role may read it; 404 otherwise (also when it
        does not exist, so a caller cannot probe what it may not read)."""
        found: calls.Passage | None = await run(caller, lambda: calls.passage(engine, caller, body.chunk_id, body.role))
        if found is None:
            return JSONResponse({"error": "NotFound", "detail": f"no readable passage {body.chunk_id!r}"}, 404)
        return found

    @app.get("/v1/collections")
    async def collections_endpoint(caller: Caller) -> list[calls.RoleCollections]:
        """The roles the key's principal holds and the collections each may read."""
        return calls.readable(engine, caller)

    @app.get("/metrics", include_in_schema=False)
    async def metrics_endpoint(caller: Caller) -> Response:
        """Prometheus' text format (``serving.metrics``): operators only, since it names the
        principals and their traffic; a scraper gets a principal of its own holding the operator role."""
        caller.require_operator(engine.cfg.serving.operator_role, "read /metrics")
        body, content_type = exposition()
        return Response(body, media_type=content_type, headers={"Cache-Control": "no-store"})

    app.mount(DOCS_ASSETS, StaticFiles(directory=swagger_ui_path), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        """Swagger UI from the pinned swagger-ui-bundle package: no CDN, so it works offline."""
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{app.title} - API docs",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
        )

    app.mount("/", mcp_only(mcp_app))  # after the routes: it answers /mcp, any other path is 404
    app.add_middleware(IncomingTrace)  # innermost: a refused request starts no query to trace
    app.add_middleware(
        Door,
        registry=principals,
        max_body_bytes=limits.max_body_bytes,
        body_timeout=limits.body_timeout_seconds,
        refused=refused,
    )
    app.add_middleware(Metered)  # added last, so outermost: it sees the door's refusals and the principal
    return app


def serve(engine: Engine, host: str, port: int, **uvicorn_args: Any) -> None:
    """Run the service under uvicorn until SIGTERM/SIGINT; then stop accepting and finish the
    requests in flight within ``serving.limits.shutdown_grace_seconds``."""
    import uvicorn

    from rag_engine.retrieval.warm import warm

    warm(engine)  # the first request within reach of a warm one (retrieval/warm.py)
    uvicorn.run(create_app(engine), host=host, port=port, log_level="info", **uvicorn_settings(engine), **uvicorn_args)


def uvicorn_settings(engine: Engine) -> dict[str, Any]:
    """The uvicorn settings that bound a connection: the graceful-shutdown wait, the idle
    keep-alive timeout, and the HTTP protocol under the connection caps and the request-head
    deadline (``serving.connections``)."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    limits = engine.cfg.serving.limits
    guard = ConnectionGuard(per_address=limits.connections_per_address, total=descriptor_budget(limits))
    return {
        "timeout_graceful_shutdown": limits.shutdown_grace_seconds,
        "timeout_keep_alive": limits.idle_timeout_seconds,
        "http": guarded_protocol(
            AutoHTTPProtocol, guard, limits.header_timeout_seconds, min(DRAIN_SECONDS, limits.shutdown_grace_seconds)
        ),
        "h11_max_incomplete_event_size": 16 * 1024,
    }
