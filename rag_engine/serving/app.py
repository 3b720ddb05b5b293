"""The query service: ``POST /v1/retrieve``, ``POST /v1/query``, ``GET /v1/health`` (FastAPI).

A request's role comes from its key, never from the caller alone: ``Authorization: Bearer <key>``
is checked against the principals' key digests (``governance.principals``) before anything else
runs, so a request without a valid key gets 401 without touching the store; the role it asks
for must be one its principal holds (403 otherwise), and the principal's id is the ``actor`` of
the query's audit records. Responses are the shapes `rag query --json` prints: ``RetrievalResult``
for retrieve, ``QueryOutcome`` for query. Typed engine errors become one-line JSON bodies: bad
input 400, an unknown role 403, the store unreachable 503. The engine call runs in a worker
thread (the query path is blocking), so the event loop keeps serving health checks meanwhile.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from rag_engine import package_version
from rag_engine.engine import Engine
from rag_engine.errors import (
    Forbidden,
    NotIngested,
    PolicyError,
    QueryInputError,
    RagError,
    StoreUnavailable,
    Unauthenticated,
)
from rag_engine.governance.principals import Principal, PrincipalRegistry
from rag_engine.retrieval.candidates import RetrievalResult
from rag_engine.retrieval.outcome import QueryOutcome
from rag_engine.retrieval.query import run_query
from rag_engine.store.connection import store_unreachable

__version__ = package_version()

STATUS: tuple[tuple[type[RagError], int], ...] = (
    (Unauthenticated, 401),
    (Forbidden, 403),
    (PolicyError, 403),
    (QueryInputError, 400),
    (NotIngested, 409),
    (StoreUnavailable, 503),
)
"""Typed engine errors and their HTTP status, most specific first; any other RagError is 500."""


class RetrieveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1)
    role: str | None = None
    """One of the principal's roles (default: its first)."""
    k: int | None = Field(None, ge=1)
    collections: list[str] | None = None
    """Collections to read; those the role may not read are blocked (an audit event)."""


class QueryRequest(RetrieveRequest):
    session_id: str | None = None
    generate: bool = True
    """False: the extractive answer (the top passages), no generation call."""


class Health(BaseModel):
    status: str
    version: str
    store: str


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def _error(status: int, exc: Exception) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": type(exc).__name__, "detail": str(exc).split("\n")[0]}, status, headers=headers)


def current_principal(request: Request, authorization: Annotated[str | None, Header()] = None) -> Principal:
    """The principal of the request's key (``Unauthenticated`` -> 401 before anything else runs)."""
    registry: PrincipalRegistry = request.app.state.principals
    return registry.authenticate(_bearer(authorization))


Caller = Annotated[Principal, Depends(current_principal)]


def create_app(engine: Engine, registry: PrincipalRegistry | None = None) -> FastAPI:
    principals = registry or PrincipalRegistry(engine.cfg, engine.root, engine.env)
    app = FastAPI(
        title="RAG engine query service",
        version=__version__,
        description="Retrieval and cited answers over the ingested packs, for an authenticated principal.",
    )
    app.state.principals = principals

    @app.exception_handler(RagError)
    async def _typed(request: Request, exc: RagError) -> JSONResponse:
        status = next((code for kind, code in STATUS if isinstance(exc, kind)), 500)
        return _error(status, exc)

    @app.exception_handler(Exception)
    async def _untyped(request: Request, exc: Exception) -> JSONResponse:
        """The driver losing the store is 503 in one line; anything else is a bug: 500, its type only."""
        gone = store_unreachable(exc)
        if gone is not None:
            return _error(503, StoreUnavailable(f"Neo4j is not answering ({type(gone).__name__}); retry later"))
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
        return Health(status="ok" if state == "ok" else "degraded", version=__version__, store=state)

    @app.post("/v1/retrieve")
    async def retrieve_endpoint(body: RetrieveRequest, caller: Caller) -> RetrievalResult:
        """Ranked candidates with provenance, no answer. Run as a query without generation, so it
        is audited like any other (what was permitted, withheld and returned, and for whom)."""
        role = caller.role(body.role)

        def run() -> RetrievalResult:
            outcome = run_query(
                engine, body.question, role, k=body.k, generate=False, collections=body.collections, actor=caller.id
            )
            return outcome.retrieval

        return await run_in_threadpool(run)

    @app.post("/v1/query")
    async def query_endpoint(body: QueryRequest, caller: Caller) -> QueryOutcome:
        """A cited answer (or "insufficient evidence"), with the candidates and the trace."""
        role = caller.role(body.role)

        def run() -> QueryOutcome:
            return run_query(
                engine,
                body.question,
                role,
                k=body.k,
                generate=body.generate,
                session_id=body.session_id,
                collections=body.collections,
                actor=caller.id,
            )

        return await run_in_threadpool(run)

    return app


def serve(engine: Engine, host: str, port: int, **uvicorn_args: Any) -> None:
    """Run the service under uvicorn until interrupted (graceful shutdown finishes requests in flight)."""
    import uvicorn

    uvicorn.run(create_app(engine), host=host, port=port, log_level="info", **uvicorn_args)
