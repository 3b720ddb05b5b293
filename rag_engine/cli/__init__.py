"""`rag`: the operator command line (typer + rich), without the orchestrator.

One sub-module per area (query, ingest, graph, setup, costs, status); rendering lives in
``render`` and ``progress``, apart from the commands; ``app`` is the one error boundary and holds
the entry points (``rag_engine.cli.app:run``, the console script; ``main``, for callers). This
``__init__`` imports none of them: its modules import each other (``from rag_engine.cli import
render``), so a package that loaded ``app`` here would sit in a circle with every one of them.
Exit codes: 0 ok, 1 a check or gate failed, 2 bad input, config or an unreachable store.
"""
