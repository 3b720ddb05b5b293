"""The MCP server: retrieval as read-only tools for agents, actions only as approval requests.

Built on the official MCP Python SDK (``mcp.server.mcpserver.MCPServer``), served two ways: over
streamable HTTP at ``/mcp`` of `rag serve` (the same port, the same keys: a request without a
valid ``Authorization: Bearer`` key is refused with 401 before it reaches the MCP session), and
over stdio by `rag mcp` for an agent that spawns the engine (the key comes from ``RAG_KEY`` in its
environment, checked once at start).

Tools marked ``readOnlyHint: true`` read only what the principal's role may read: ``search``
(ranked passages with provenance), ``fetch_passage`` (one cited chunk), ``list_collections``.
The design's split between retrieval and action is enforced here, not left to the agent: the two
tools marked ``destructiveHint: true`` (``request_graph_cleanup``, ``request_audit_purge``) change
nothing. They return the action's plan and the sha256 an approval must bind; a person approves and
runs it through the operator path, and an approval for other inputs is refused there. Every tool
call runs under the service's limits (rate, concurrency, pool, timeout).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from rag_engine import package_version
from rag_engine.engine import Engine
from rag_engine.errors import Forbidden, PolicyError, QueryInputError, RagError, RateLimited, Unauthenticated
from rag_engine.governance.audit import AuditRecord, audit_trail
from rag_engine.governance.principals import Principal, PrincipalRegistry
from rag_engine.serving import calls
from rag_engine.serving.follow import UNAVAILABLE, IndexFollower, query_on, retrieve_on
from rag_engine.serving.limits import EnginePool, Limiter, bounded
from rag_engine.serving.wire import bearer, first_line

T = TypeVar("T")
log = logging.getLogger(__name__)
REFUSALS = (Unauthenticated, Forbidden, PolicyError, QueryInputError, RateLimited)
"""The errors that are a refusal of the caller (audited), not a failure of the service."""

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
ASKS_APPROVAL = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)
SNIPPET_CHARS = 1200


def tool_error(exc: RagError) -> ToolError:
    """A typed engine error as the tool's error result: one line, its type first."""
    return ToolError(f"{type(exc).__name__}: {first_line(exc)}")


def build_mcp(
    engine: Engine,
    registry: PrincipalRegistry,
    limiter: Limiter,
    pool: EnginePool,
    *,
    principal: Principal | None = None,
    follower: IndexFollower | None = None,
) -> MCPServer:
    """The MCP server over ``engine``. ``principal``: fixed for stdio (authenticated at start);
    without it every call authenticates its HTTP request's bearer key again (keys are reloaded
    on change, so a revoked key stops working mid-session)."""
    server: MCPServer = MCPServer(
        name="rag-engine",
        title="RAG engine",
        version=package_version(),
        instructions=(
            "Search the ingested regulated-domain corpora and fetch cited passages. Cite chunk_id. "
            "Tools that change state only return an approval request for a person."
        ),
        log_level="WARNING",
    )
    follow = follower or IndexFollower(engine)

    def refused(who: Principal | None, tool: str, exc: RagError) -> ToolError:
        """The tool's error; a refusal (a key, a role, a limit, bad input) is also an audit record
        naming the principal. Another failure (the store down, a timeout) is only the error."""
        if isinstance(exc, REFUSALS):
            record = AuditRecord(
                event="request_refused",
                actor=who.id if who else None,
                payload={"tool": tool, "error": type(exc).__name__, "via": "mcp"},
            )
            try:
                audit_trail(engine).append(record)
            except Exception as failure:  # noqa: BLE001 - the refusal stays answered when the trail is down
                log.warning("could not record a refusal (%s)", type(failure).__name__)
        return tool_error(exc)

    def caller(ctx: Context, tool: str) -> Principal:
        if principal is not None:
            return principal
        headers = ctx.headers or {}
        try:
            return registry.authenticate(bearer(headers.get("authorization")))
        except RagError as exc:
            raise refused(None, tool, exc) from None

    async def run(who: Principal, tool: str, fn: Callable[[], T]) -> T:
        try:
            return await bounded(limiter, pool, who.id, fn)
        except RagError as exc:
            raise refused(who, tool, exc) from None

    @server.tool(annotations=READ_ONLY)
    async def search(
        question: str, ctx: Context, k: int = 8, collections: list[str] | None = None, role: str | None = None
    ) -> dict[str, Any]:
        """Ranked passages for a question, with provenance (chunk_id, document, anchor, collection,
        score). Only collections the caller's role may read are searched; collections asked for
        but not readable are reported in `events`."""
        who = caller(ctx, "search")
        result = await run(
            who, "search", lambda: retrieve_on(follow, lambda e: calls.retrieve(e, who, question, role, k, collections))
        )
        return {
            "role": result.role,
            "collections": list(result.collections),
            "passages": [
                {
                    "chunk_id": c.chunk_id,
                    "doc_id": c.doc_id,
                    "doc_title": c.doc_title,
                    "anchor": c.anchor,
                    "heading": c.heading,
                    "collection": c.collection,
                    "score": round(c.score, 6),
                    "text": c.text[:SNIPPET_CHARS],
                }
                for c in result.candidates
            ],
            "events": [e for e in result.events if e.get("event") in ("collections_blocked", UNAVAILABLE)],
        }

    @server.tool(annotations=READ_ONLY)
    async def ask(
        question: str,
        ctx: Context,
        conversation: list[dict[str, Any]] | None = None,
        k: int = 8,
        collections: list[str] | None = None,
        role: str | None = None,
        generate: bool = True,
    ) -> dict[str, Any]:
        """A cited answer to a question (or "insufficient evidence"), with the passages it cites.
        `conversation`: the earlier turns of the chat, oldest first, each {"role": "user" or
        "assistant", "content": text}; the answer model sees the most recent ones within the
        conversation budget (`conversation_kept`, `conversation_overflow`). `generate: false`
        answers extractively (no model call)."""
        who = caller(ctx, "ask")
        outcome = await run(
            who,
            "ask",
            lambda: query_on(
                follow,
                lambda e: calls.query(
                    e, who, question, role, k=k, collections=collections, generate=generate, conversation=conversation
                ),
            ),
        )
        answer = outcome.answer
        return {
            "role": outcome.retrieval.role,
            "answer": answer.text,
            "insufficient_evidence": answer.insufficient_evidence,
            "citations": list(answer.citations),
            "method": answer.method,
            "conversation_kept": len(outcome.context.conversation),
            "conversation_overflow": [o.item_id for o in outcome.context.overflow if o.category == "conversation"],
            "events": [e for e in outcome.events if e.get("event") in ("collections_blocked", UNAVAILABLE)],
        }

    @server.tool(annotations=READ_ONLY)
    async def fetch_passage(chunk_id: str, ctx: Context, role: str | None = None) -> dict[str, Any]:
        """The full current text of one passage by its chunk_id, if the caller's role may read it
        (a passage it may not read is reported as not found, like one that does not exist)."""
        who = caller(ctx, "fetch_passage")
        found = await run(who, "fetch_passage", lambda: calls.passage(engine, who, chunk_id, role))
        return {"found": found is not None, "passage": None if found is None else found.model_dump()}

    @server.tool(annotations=READ_ONLY)
    async def list_collections(ctx: Context) -> dict[str, Any]:
        """The roles the caller holds and the collections each may read."""
        who = caller(ctx, "list_collections")
        try:
            roles = calls.readable(engine, who)
        except RagError as exc:
            raise refused(who, "list_collections", exc) from None
        return {"principal": who.id, "roles": [r.model_dump() for r in roles]}

    @server.tool(annotations=ASKS_APPROVAL)
    async def request_graph_cleanup(ctx: Context) -> dict[str, Any]:
        """Ask for the removal of stale graph paths. Changes nothing: returns the plan and the
        inputs hash a person must approve; only an approved operator command carries it out."""
        who = caller(ctx, "request_graph_cleanup")
        req = await run(who, "request_graph_cleanup", lambda: calls.approval_request(engine, who, "graph_cleanup"))
        return req.model_dump(mode="json")

    @server.tool(annotations=ASKS_APPROVAL)
    async def request_audit_purge(ctx: Context) -> dict[str, Any]:
        """Ask for the deletion of audit records past retention. Changes nothing: returns the plan
        and the inputs hash a person must approve; only an approved operator command carries it out."""
        who = caller(ctx, "request_audit_purge")
        req = await run(who, "request_audit_purge", lambda: calls.approval_request(engine, who, "delete_audit_records"))
        return req.model_dump(mode="json")

    return server
