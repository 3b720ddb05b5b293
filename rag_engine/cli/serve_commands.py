"""`rag serve`: the query service for applications, keyed on authenticated principals."""

from __future__ import annotations

from typing import Annotated

import typer

from rag_engine.cli.common import JsonOpt, emit_json, engine, err, use_json


def serve(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option("--host", help="Address to listen on (default serving.host).")] = None,
    port: Annotated[int | None, typer.Option("--port", help="Port (default serving.port).")] = None,
    json: JsonOpt = False,
) -> None:
    """Serve /v1/retrieve, /v1/query and /v1/health (OpenAPI at /docs) until interrupted.

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
                "routes": ["GET /v1/health", "POST /v1/retrieve", "POST /v1/query", "GET /openapi.json"],
                "principals": [p.id for p in s.principals],
            },
        )
    run(eng, bind_host, bind_port)


def mount(app: typer.Typer) -> None:
    app.command("serve")(serve)
