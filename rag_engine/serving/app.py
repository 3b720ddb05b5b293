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
waits ``shutdown_grace_seconds`` for requests in flight; the pool then finishes its calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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
from rag_engine.governance.principals import Principal, PrincipalRegistry
from rag_engine.retrieval.candidates import RetrievalResult
from rag_engine.retrieval.outcome import QueryOutcome
from rag_engine.serving import calls
from rag_engine.serving.limits import EnginePool, Limiter, bounded, store_gone
from rag_engine.serving.mcp_server import build_mcp
from rag_engine.serving.wire import bearer, first_line

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


class RetrieveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

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


class PassageRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    chunk_id: str = Field(min_length=1, max_length=512)
    role: str | None = None


class Health(BaseModel):
    status: str
    version: str
    store: str
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


class BodyLimit:
    """Refuses a request body over ``limit`` bytes with 413 before the app parses it: by its
    Content-Length when it says, else by reading at most ``limit`` bytes of the stream first."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = RequestTooLarge(f"the request body is over {self.limit} bytes (serving.limits.max_body_bytes)")
        length = dict(scope.get("headers") or ()).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await rag_error(too_large)(scope, receive, send)
            return
        if length is not None:
            await self.app(scope, receive, send)
            return
        # no Content-Length (a chunked body): read it here, at most limit bytes, then replay it
        chunks: list[bytes] = []
        seen, more = 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            seen += len(chunks[-1])
            if seen > self.limit:
                await rag_error(too_large)(scope, receive, send)
                return
            more = message.get("more_body", False)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)


class KeyRequired:
    """The MCP endpoint's door: 401 for a request without a valid key, before any MCP session."""

    def __init__(self, app: ASGIApp, registry: PrincipalRegistry):
        self.app, self.registry = app, registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or ()}
            try:
                self.registry.authenticate(bearer(headers.get("authorization")))
            except Unauthenticated as exc:
                await rag_error(exc)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def current_principal(request: Request, authorization: Annotated[str | None, Header()] = None) -> Principal:
    """The principal of the request's key (``Unauthenticated`` -> 401 before anything else runs)."""
    registry: PrincipalRegistry = request.app.state.principals
    return registry.authenticate(bearer(authorization))


Caller = Annotated[Principal, Depends(current_principal)]


def create_app(engine: Engine, registry: PrincipalRegistry | None = None) -> FastAPI:
    principals = registry or PrincipalRegistry(engine.cfg, engine.root, engine.env)
    limits = engine.cfg.serving.limits
    limiter, pool = Limiter(limits), EnginePool(limits)
    mcp = build_mcp(engine, principals, limiter, pool)
    mcp_app = mcp.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True, host=engine.cfg.serving.host
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with mcp.session_manager.run():
            yield
        pool.shutdown()

    app = FastAPI(
        title="RAG engine query service",
        version=__version__,
        description="Retrieval and cited answers over the ingested packs, for an authenticated principal.",
        lifespan=lifespan,
    )
    app.state.principals = principals
    app.state.pool = pool

    @app.exception_handler(RagError)
    async def _typed(request: Request, exc: RagError) -> JSONResponse:
        return rag_error(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        """422 in one line: where and what, never the submitted value."""
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}" for e in exc.errors()
        )
        return JSONResponse({"error": "InvalidRequest", "detail": problems}, 422)

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
        return Health(
            status="ok" if state == "ok" else "degraded", version=__version__, store=state, workers_busy=pool.busy
        )

    async def run(caller: Principal, fn: Any) -> Any:
        return await bounded(limiter, pool, caller.id, fn)

    @app.post("/v1/retrieve")
    async def retrieve_endpoint(body: RetrieveRequest, caller: Caller) -> RetrievalResult:
        """Ranked candidates with provenance, no answer. Run as a query without generation, so it
        is audited like any other (what was permitted, withheld and returned, and for whom)."""
        result: RetrievalResult = await run(
            caller, lambda: calls.retrieve(engine, caller, body.question, body.role, body.k, body.collections)
        )
        return result

    @app.post("/v1/query")
    async def query_endpoint(body: QueryRequest, caller: Caller) -> QueryOutcome:
        """A cited answer (or "insufficient evidence"), with the candidates and the trace."""
        outcome: QueryOutcome = await run(
            caller,
            lambda: calls.query(
                engine,
                caller,
                body.question,
                body.role,
                k=body.k,
                collections=body.collections,
                session_id=body.session_id,
                generate=body.generate,
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
            return calls.query(
                engine,
                caller,
                body.question,
                role,
                k=body.k,
                collections=body.collections,
                session_id=body.session_id,
                generate=body.generate,
                on_retrieved=publish,
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

    app.mount("/", KeyRequired(mcp_app, principals))  # after the routes: it answers /mcp only
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)
    return app


def serve(engine: Engine, host: str, port: int, **uvicorn_args: Any) -> None:
    """Run the service under uvicorn until SIGTERM/SIGINT; then stop accepting and finish the
    requests in flight within ``serving.limits.shutdown_grace_seconds``."""
    import uvicorn

    grace = engine.cfg.serving.limits.shutdown_grace_seconds
    uvicorn.run(
        create_app(engine), host=host, port=port, log_level="info", timeout_graceful_shutdown=grace, **uvicorn_args
    )
