"""`rag serve`: the query service for applications; `rag mcp`: the MCP server over stdio for an
agent that spawns the engine. Both are keyed on authenticated principals."""

from __future__ import annotations

from typing import Annotated

import typer

from rag_engine.cli.common import BAD_INPUT, JsonOpt, emit_json, engine, err, use_json


def serve(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option("--host", help="Address to listen on (default serving.host).")] = None,
    port: Annotated[int | None, typer.Option("--port", help="Port (default serving.port).")] = None,
    json: JsonOpt = False,
) -> None:
    """Serve /v1/retrieve, /v1/query, /v1/passage, /v1/collections, /v1/health and MCP at /mcp
    (OpenAPI at /docs) until interrupted.

    Every request but health needs `Authorization: Bearer <key>` of a principal in
    serving.principals; the request's role must be one of that principal's roles. Refuses to start
    with no principal configured. With --json the address and routes are printed as one JSON
    line before serving (for a supervisor that reads where the service listens)."""
    from rag_engine.serving.app import serve as run

    use_json(ctx, json)
    eng = engine(ctx, store=True)
    if not eng.cfg.serving.principals:
        err().print(
            "no principal is configured (serving.principals): nobody could call the service; "
            "add one with key_sha256_env or key_sha256_file",
            style="red",
            markup=False,
        )
        raise typer.Exit(2)
    s = eng.cfg.serving
    bind_host, bind_port = host or s.host, port or s.port
    if json:
        emit_json(
            ctx,
            {
                "url": f"http://{bind_host}:{bind_port}",
                "routes": [
                    "GET /v1/health",
                    "POST /v1/retrieve",
                    "POST /v1/query",
                    "POST /v1/passage",
                    "GET /v1/collections",
                    "POST /mcp",
                    "GET /openapi.json",
                ],
                "principals": [p.id for p in s.principals],
            },
        )
    run(eng, bind_host, bind_port)


def mcp(ctx: typer.Context) -> None:
    """Serve the MCP tools over stdio (for an agent that starts this command).

    The key comes from the RAG_KEY environment variable or `rag --key-file PATH` (never an
    argument: argv is visible to every user of the machine); it is checked once at start against
    serving.principals, and every tool call runs as its principal. Read-only tools: search,
    fetch_passage, list_collections; request_graph_cleanup and request_audit_purge only return an
    approval request. When stdin closes, calls still running are answered before the process
    exits (within serving.limits.shutdown_grace_seconds). No --json: stdout is the MCP protocol."""
    import anyio

    from rag_engine.cli.auth import KEY_ENV, cli_key
    from rag_engine.errors import Unauthenticated
    from rag_engine.governance.principals import PrincipalRegistry
    from rag_engine.serving.limits import EnginePool, Limiter
    from rag_engine.serving.mcp_server import build_mcp
    from rag_engine.serving.stdio import serve_stdio

    eng = engine(ctx, store=True)
    registry = PrincipalRegistry(eng.cfg, eng.root, eng.env)
    try:
        principal = registry.authenticate(cli_key(ctx))
    except Unauthenticated as exc:
        err().print(
            f"rag mcp: {exc} (set {KEY_ENV} or `rag --key-file PATH` to a key of a principal in serving.principals)",
            markup=False,
        )
        raise typer.Exit(BAD_INPUT) from None
    limits = eng.cfg.serving.limits
    server = build_mcp(eng, registry, Limiter(limits), EnginePool(limits), principal=principal)
    anyio.run(serve_stdio, server, float(limits.shutdown_grace_seconds))


def mount(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.command("mcp")(mcp)
