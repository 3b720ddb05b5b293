"""`rag`: the operator command line (typer + rich), without the orchestrator.

One sub-module per area (query, ingest, graph, setup, costs, status); rendering lives in
``render`` and ``progress``, apart from the commands; ``app`` is the one error boundary.
Exit codes: 0 ok, 1 a check or gate failed, 2 bad input, config or an unreachable store.
"""

from rag_engine.cli.app import app, main

__all__ = ["app", "main"]
