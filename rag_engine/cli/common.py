"""What every command shares: exit codes, the two consoles, the JSON convention, the engine."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from rag_engine import DEFAULT_CONFIG

if TYPE_CHECKING:
    from typer._click import Context as ClickContext  # typer.Context's base: what a group's invoke receives

    from rag_engine.engine import Engine  # imported when a command asks for it: `rag --help` stays fast

OK, CHECK_FAILED, BAD_INPUT = 0, 1, 2
"""0 ok; 1 a check or gate failed (ingest with failures, a blocking quality check); 2 bad input,
bad config, a typed engine error or an unreachable store."""

EXIT_CODES = {
    OK: "ok",
    CHECK_FAILED: "a check or gate failed: ingest partitions or extraction calls failed, "
    "a blocking graph quality check failed",
    BAD_INPUT: "bad input or config, a typed engine error, a refused key or role, Neo4j unreachable, "
    "nothing ingested yet",
}

JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json", help="Machine output: one JSON document on stdout, nothing else (progress and logs go to stderr)."
    ),
]


@dataclass
class State:
    """Root options, kept on the click context (``ctx.obj``)."""

    config: str = DEFAULT_CONFIG
    debug: bool = False
    json: bool = False
    key_file: str | None = None
    """`rag --key-file`: where the caller's key is (``cli.auth``); else ``RAG_KEY``."""


def state(ctx: ClickContext) -> State:
    root = ctx.find_root()
    if not isinstance(root.obj, State):
        root.obj = State()
    return root.obj


def out(*, wide: bool = False) -> Console:
    """Human output (stdout). Resolved per call so a test runner's captured stdout is used.
    A pipe or file gets 140 columns, or with ``wide`` as many as a table needs (its rows never wrap)."""
    if sys.stdout.isatty():
        return Console(highlight=False)
    return Console(highlight=False, width=10_000 if wide else 140)


def err() -> Console:
    """Errors, progress and notes (stderr); one line each, never wrapped."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


def emit_json(ctx: ClickContext, payload: Any) -> None:
    """The JSON mode's only stdout write."""
    state(ctx).json = True
    sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
    sys.stdout.flush()


def use_json(ctx: typer.Context, flag: bool) -> bool:
    """Remember JSON mode so the error boundary keeps stdout pure (an error is a JSON object there)."""
    if flag:
        state(ctx).json = True
    return flag


def engine(ctx: typer.Context, *, store: bool = False) -> Engine:
    """The engine for the root --config; with ``store`` the Neo4j connection is checked first, so a
    stopped server is one line after the connect timeout, not a retrying traceback."""
    from rag_engine.engine import Engine

    eng = Engine.from_path(state(ctx).config)
    ctx.call_on_close(eng.close)
    ctx.call_on_close(lambda: warn_broken_packs(eng))
    if store:
        engine_store_check(ctx, eng)
    return eng


def warn_broken_packs(eng: Engine) -> None:
    """One line per enabled pack left out because it failed to load (when the command loaded packs)."""
    if eng.packs_loaded:
        for _, exc in sorted(eng.broken_packs.items()):
            err().print(f"warning: broken pack left out: {type(exc).__name__}: {exc}", style="yellow", markup=False)


def engine_store_check(ctx: typer.Context, eng: Engine) -> None:
    from rag_engine.store.connection import check_reachable

    check_reachable(eng.driver, eng.neo4j_target)


def progress_wanted(ctx: typer.Context) -> bool:
    """Progress bars only for a person: not in JSON mode, not when stderr is a pipe or file."""
    return not state(ctx).json and sys.stderr.isatty()
