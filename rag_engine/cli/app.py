"""The root `rag` app: global options, sub-apps and the one error boundary.

Every typed engine error (RagError) becomes one red line ``error: <Type>: <message>`` on stderr and
exit 2 (in JSON mode stdout gets ``{"error": ...}`` instead of nothing else); a Neo4j driver error
that escaped the engine is named for what it means. Tracebacks only with --debug. Refused
credentials are typed errors too (``Unauthenticated``, ``Forbidden``: ``cli.auth``), so exit 2.
"""

from __future__ import annotations

import gc
import importlib.util
import logging
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from rag_engine import DEFAULT_CONFIG, package_version
from rag_engine.cli import commands
from rag_engine.cli.common import BAD_INPUT, CHECK_FAILED, State, emit_json, err, state
from rag_engine.errors import NotIngested, RagError, StoreUnavailable

if TYPE_CHECKING:
    from typer._click import Context as ClickContext  # the context type TyperGroup.invoke declares


def _translate(exc: BaseException) -> RagError | None:
    """Neo4j driver errors the engine did not map yet, as the typed error they mean."""
    import neo4j.exceptions as nx

    if isinstance(exc, (nx.ServiceUnavailable, nx.SessionExpired)):
        return StoreUnavailable(
            f"Neo4j connection lost ({type(exc).__name__}): is it running? `make neo4j-start` starts the local one"
        )
    if isinstance(exc, nx.ClientError) and "index" in (exc.message or "").lower() and "not" in exc.message.lower():
        return NotIngested(f"no search index yet ({exc.code}): run `rag ingest` (or `make demo`) first")
    return None


class _Boundary(TyperGroup):
    """Root group: turns errors into one line and an exit code, for every sub-command."""

    def invoke(self, ctx: ClickContext) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            if type(exc).__module__.split(".")[0] in ("click", "typer"):  # usage errors, help, exit codes
                raise
            st = ctx.obj if isinstance(ctx.obj, State) else State()
            if st.debug:
                raise
            typed = exc if isinstance(exc, RagError) else _translate(exc)
            if typed is None:  # a bug: say so in one line, the traceback is behind --debug
                _report(
                    ctx,
                    st,
                    type(exc).__name__,
                    str(exc),
                    CHECK_FAILED,
                    hint=" (unexpected; run with --debug for the traceback)",
                )
                raise typer.Exit(CHECK_FAILED) from None
            _report(ctx, st, type(typed).__name__, str(typed), BAD_INPUT)
            raise typer.Exit(BAD_INPUT) from None


def _report(ctx: ClickContext, st: State, kind: str, message: str, code: int, hint: str = "") -> None:
    err().print(f"error: {kind}: {message}{hint}", style="red", markup=False)
    if st.json:  # stdout stays one JSON document
        emit_json(ctx, {"error": {"type": kind, "message": message, "exit_code": code}})


app = typer.Typer(
    name="rag",
    cls=_Boundary,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    help="RAG engine operator CLI: ingest, query, status and graph upkeep, without the orchestrator.\n\n"
    "Exit codes: 0 ok, 1 a check or gate failed, 2 bad input, config, a refused key or role, or an "
    "unreachable store.",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rag {package_version()}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    config: Annotated[
        str, typer.Option("--config", help="Engine config file, relative to the project root.", envvar="RAG_CONFIG")
    ] = DEFAULT_CONFIG,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks and engine logs (INFO).")] = False,
    key_file: Annotated[
        str | None,
        typer.Option(
            "--key-file",
            help="A file holding your key (else the RAG_KEY environment variable; never a command-line "
            "argument). With principals configured, `audit`, `status`, `costs` and approvals need an "
            "operator's key; `query` runs as the key's principal.",
            envvar="RAG_KEY_FILE",
        ),
    ] = None,
    _: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    st = state(ctx)
    st.config, st.debug, st.key_file = config, debug, key_file
    # driver notifications (deprecations, 'index already exists' on a fresh store) read like errors
    logging.getLogger("neo4j.notifications").setLevel(logging.DEBUG if debug else logging.ERROR)
    logging.getLogger("neo4j").setLevel(logging.DEBUG if debug else logging.ERROR)
    if debug:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")


app.add_typer(commands.config_app, name="config")
app.add_typer(commands.packs_app, name="packs")
app.command("query", no_args_is_help=True)(commands.query)
app.command("ingest")(commands.ingest)
app.command("status")(commands.status)
app.command("quality")(commands.quality)
app.command("cleanup")(commands.cleanup)
app.command("feedback", no_args_is_help=True)(commands.feedback)
app.command("costs")(commands.costs)
app.command("reindex")(commands.reindex)


def _mount_optional() -> None:
    """Commands of engine modules that may not exist yet in this checkout (provider swap, re-index)."""
    for module in ("rag_engine.cli.swap_commands", "rag_engine.cli.audit_commands", "rag_engine.cli.serve_commands"):
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module).mount(app)


_mount_optional()


def main(argv: list[str] | None = None) -> int:
    """Runs one command; returns the exit code (callers such as the demo script use it)."""
    try:
        app(args=argv, prog_name="rag")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def run() -> None:
    """The ``rag`` console script (and ``python -m rag_engine.cli``): ``main``, then exit with its
    code. The command has closed what it opened (the store driver, committed its records); the
    objects left are frozen out of the interpreter's final garbage collection, which otherwise
    walks every one of them on the way out (0.15-0.2 s of a one-off `rag query` at idle)."""
    code = main()
    gc.freeze()
    sys.exit(code)
