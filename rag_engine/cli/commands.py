"""The commands: each parses options, calls the engine, then renders (render.py) or emits JSON.

The graph commands (``graph_commands``) and the re-index (``reindex_commands``) live apart and are
named here with the rest for ``cli.app``; so do the swap and audit commands (mounted by ``cli.app``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from rag_engine.cli import auth, render
from rag_engine.cli.common import (
    BAD_INPUT,
    CHECK_FAILED,
    JsonOpt,
    emit_json,
    engine,
    engine_store_check,
    err,
    out,
    progress_wanted,
    use_json,
)
from rag_engine.cli.graph_commands import cleanup, feedback, quality
from rag_engine.cli.reindex_commands import reindex
from rag_engine.errors import NotIngested

# -- config / packs ---------------------------------------------------------------------------

config_app = typer.Typer(help="Configuration: validate the config and the provider registry.", no_args_is_help=True)
packs_app = typer.Typer(help="Domain packs: load and summarize the enabled ones.", no_args_is_help=True)


def _active_embedder(eng: Any) -> dict[str, Any]:
    """Which embedder answers, and where (endpoint after any endpoint_env override, redacted)."""
    from rag_engine.config import _redact
    from rag_engine.providers.registry import resolve_endpoint

    spec = eng.registry.embedding
    endpoint = resolve_endpoint(spec.provider, eng.env) if spec.provider.kind != "local_hash" else None
    return {
        "model": spec.name,
        "provider": spec.provider.name,
        "kind": spec.provider.kind,
        "endpoint": _redact(endpoint) if endpoint else "built-in (no server)",
        "input_modes": spec.model.input_modes.model_dump() if spec.model.input_modes else None,
        "embedding_cache": str(eng.embedding_cache_path) if eng.embedding_cache_path else None,
    }


def _probe(eng: Any) -> Exception | None:
    """None when Neo4j answers within the connect timeout, else the typed error saying why not (a
    stopped store ``StoreUnavailable``, a URI the driver refuses ``ConfigError``)."""
    from rag_engine.errors import ConfigError, StoreUnavailable
    from rag_engine.store.connection import probe_store

    try:
        probe_store(eng.neo4j_target, eng.env, timeout_s=eng.neo4j_target.connect_timeout_s)
    except (StoreUnavailable, ConfigError) as exc:
        return exc
    return None


@config_app.command("check")
def config_check(ctx: typer.Context, json: JsonOpt = False) -> None:
    """Validate config and registry; print the config hash, models, active embedder, credential
    presence, and probe Neo4j (bounded by the connect timeout). Exit 2 when the store cannot be
    reached, after printing the rest."""
    from rag_engine.config import config_hash

    use_json(ctx, json)
    eng = engine(ctx)
    down = _probe(eng)
    data: dict[str, Any] = {
        "config_hash": config_hash(eng.cfg),
        "generation_model": eng.registry.generation.identity,
        "embedding_model": eng.registry.embedding.identity,
        "active_embedder": _active_embedder(eng),
        "credentials": eng.registry.credential_status(),
        "neo4j": repr(eng.neo4j_target),
        "store": "reachable" if down is None else f"unreachable: {down}",
    }
    if json:
        error = {"type": type(down).__name__, "message": str(down), "exit_code": BAD_INPUT}
        emit_json(ctx, {**data, "error": error} if down else data)
    else:
        flat = {k: v for k, v in data.items() if not isinstance(v, dict)}
        flat.update({f"active_embedder.{k}": v for k, v in data["active_embedder"].items()})
        flat.update({f"credential {k}": v for k, v in data["credentials"].items()})
        title = "config check: ok" if down is None else "config check: config ok, store unreachable"
        render.kv(out(wide=True), title, flat)  # a row is never broken (the store's line is long)
    if down:
        err().print(f"error: {type(down).__name__}: {down}", style="red", markup=False)
        raise typer.Exit(BAD_INPUT)


@packs_app.command("smoke")
def packs_smoke(ctx: typer.Context, json: JsonOpt = False) -> None:
    """Load every enabled pack and summarize: count, domains, versions, documents, collections.
    Exit 1 when an enabled pack failed to load (the others are still summarized)."""
    from rag_engine.ops.pack_report import pack_summary

    use_json(ctx, json)
    summary = pack_summary(engine(ctx))
    if json:
        emit_json(ctx, {**summary, "exit_code": CHECK_FAILED if summary["broken"] else 0})
    else:
        console = out()
        console.print(f"pack_count: {summary['pack_count']}")
        for name in ("domains", "versions", "documents"):
            console.print(f"{name}: {', '.join(f'{k}={v}' for k, v in summary[name].items())}", markup=False)
    if summary["broken"]:  # each named on stderr by the engine helper
        raise typer.Exit(CHECK_FAILED)


@packs_app.command("lint")
def packs_lint(
    ctx: typer.Context,
    pack: Annotated[str | None, typer.Option("--pack", help="Only this enabled pack (default: all).")] = None,
    json: JsonOpt = False,
) -> None:
    """Check packs without a database: manifest, corpus chunking, local ids, references, golden anchors,
    extraction types, pack imports. Exit 1 on errors, 0 with warnings only."""
    from rag_engine.cli.common import state
    from rag_engine.config import load_config, under_root
    from rag_engine.engine import project_root
    from rag_engine.ops.pack_lint import lint_packs, render_text

    use_json(ctx, json)
    root = project_root()
    report = lint_packs(load_config(under_root(root, state(ctx).config)), root, pack)
    if json:
        emit_json(
            ctx,
            {
                **report.model_dump(mode="json"),
                "errors": report.errors,
                "warnings": report.warnings,
                "exit_code": report.exit_code,
            },
        )
    else:
        out().print(render_text(report), markup=False, highlight=False, soft_wrap=True)
    if report.exit_code:
        raise typer.Exit(report.exit_code)


# -- query ------------------------------------------------------------------------------------


def _check_ingested(eng: Any, collections: tuple[str, ...]) -> None:
    """Querying an empty store: say so and what to run, instead of an index error from Neo4j."""
    from rag_engine.store.status import any_served

    if not any_served(eng.driver, eng.database, collections):
        raise NotIngested(
            f"nothing ingested yet for collections {list(collections)}: run `rag ingest` (or `make demo`) first"
        )


def query(
    ctx: typer.Context,
    question: Annotated[str, typer.Argument(help="The question, in plain words or a reference like 'Article 17(1)'.")],
    role: Annotated[
        str | None,
        typer.Option(
            "--role",
            help="The role to query as: decides which collections may be read. An operator's flag on this "
            "machine, not an identity: applications call `rag serve`, where the role comes from their key. "
            "With a key (RAG_KEY or `rag --key-file`) the role must be one its principal holds (default: "
            "its first) and the principal is the query's actor; without one --role is required.",
        ),
    ] = None,
    k: Annotated[
        int | None,
        typer.Option("-k", "--k", help="Candidates to return (default from config; the engine validates the range)."),
    ] = None,
    no_generate: Annotated[
        bool, typer.Option("--no-generate", help="Extractive answer, no generation model call.")
    ] = False,
    session: Annotated[
        str | None,
        typer.Option(
            "--session",
            help="Session id recorded in the audit trail (`rag audit --session S`): up to 128 letters, digits "
            "and . _ : @ / -",
        ),
    ] = None,
    collection: Annotated[
        list[str] | None,
        typer.Option(
            "--collection",
            help="Only these collections (repeatable); ones the role may not read are blocked and audited.",
        ),
    ] = None,
    history: Annotated[
        Path | None,
        typer.Option(
            "--history",
            help="A JSON file holding the earlier turns of the chat, oldest first: "
            '[{"role": "user" | "assistant", "content": "..."}]; the answer model sees the most recent '
            "within context.conversation tokens.",
        ),
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Retrieve ranked, cited chunks for a question and answer it; shows plan, candidates, expansions, answer."""
    from rag_engine.governance.audit import check_session_id
    from rag_engine.governance.policy import gate
    from rag_engine.retrieval.conversation import from_file
    from rag_engine.retrieval.query import run_query

    use_json(ctx, json)
    check_session_id(session)  # bad input before any store or model is touched
    eng = engine(ctx)
    conversation = from_file(history, eng.cfg.context) if history is not None else None
    principal = auth.query_principal(ctx, eng)  # a key given: its principal asks, within its roles
    if principal is not None:
        role = principal.role(role)
    elif role is None:  # required, and the user needs to know the choices
        from rag_engine.errors import PolicyError

        raise PolicyError(f"--role is required: one of {', '.join(eng.cfg.roles)} (config/engine.yaml, roles:)")
    collections = gate(eng.cfg, role).collections  # a bad role is bad input, whatever the store's state
    engine_store_check(ctx, eng)
    _check_ingested(eng, collections)
    outcome = run_query(
        eng,
        question,
        role,
        k=k,
        generate=not no_generate,
        session_id=session,
        collections=collection or None,
        conversation=conversation,
        actor=principal.id if principal is not None else None,
    )
    if json:
        emit_json(ctx, outcome.model_dump(mode="json"))
        return
    render.query(out(), outcome)


# -- ingest -----------------------------------------------------------------------------------


def _ingest_totals(reports: dict[str, Any]) -> dict[str, int]:
    graph = reports["graph_writes"]
    extraction = reports.get("llm_extraction")
    return {
        "documents": len(reports["chunks"].done) + len(reports["chunks"].unchanged),
        "chunks": reports["chunks"].total("chunks"),
        "resolved": graph.total("resolved"),
        "unresolved": graph.total("unresolved"),
        "relationships": graph.total("relationships"),
        "extraction_failed_calls": extraction.total("failed") if extraction else 0,
        "extraction_budget_skipped": extraction.total("skipped") if extraction else 0,
    }


def ingest(
    ctx: typer.Context,
    pack: Annotated[str | None, typer.Option("--pack", help="Only this enabled pack (default: all).")] = None,
    no_extract: Annotated[bool, typer.Option("--no-extract", help="Skip LLM graph extraction.")] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Redo every step, even for documents whose content and "
            "step code versions are unchanged since their last run.",
        ),
    ] = False,
    estimate: Annotated[
        bool,
        typer.Option("--estimate", help="Show the paid extraction estimate and its inputs_hash; ingest nothing."),
    ] = False,
    approved_by: Annotated[
        str, typer.Option("--approved-by", help="Who approves paid extraction above automation.max_auto_cost_usd.")
    ] = "",
    reason: Annotated[str, typer.Option("--reason", help="Why (with --approved-by).")] = "",
    inputs_hash: Annotated[
        str | None, typer.Option("--inputs-hash", help="The inputs_hash --estimate printed: run only if unchanged.")
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Ingest the enabled packs (or one) into Neo4j, without Dagster.

    Paid extraction above automation.max_auto_cost_usd (or of unknown cost) needs the same approval as
    in Dagster: see it with --estimate, then --approved-by, --reason and --inputs-hash (with principals
    configured, an operator's key in RAG_KEY).

    The same steps as the assets. Unchanged documents are skipped per step (change detection; --force redoes them). Exits 1
    when a partition or an extraction call failed, or the extraction run budget left chunks for the next run (which
    continues them), after finishing the others."""  # noqa: E501 - help text: its line breaks show
    from dataclasses import asdict

    from rag_engine.cli.progress import RichIngestProgress
    from rag_engine.ingest.pipeline import ingest_pack

    use_json(ctx, json)
    eng = engine(ctx, store=True)
    packs = [eng.pack(pack)] if pack else list(eng.packs.values())
    if not no_extract:  # paid extraction: the same approval as Dagster's, before any model call
        from rag_engine.governance.approvals import PAID_AUTOMATION, operator_approval
        from rag_engine.governance.approvals import inputs_hash as hash_of
        from rag_engine.governance.audit import audit_trail
        from rag_engine.ops.paid_work import ingest_inputs, require_ingest_approval

        paid = ingest_inputs(eng, packs)
        if estimate:
            data = {**paid, "inputs_hash": hash_of(paid), "approval_needed": bool(paid["paid"])}
            emit_json(ctx, data) if json else render.counts(
                out(),
                "paid extraction estimate",
                {"approval needed": data["approval_needed"]}
                | {f"{name} cost_usd": e["cost_usd"] for name, e in paid["paid"].items()}
                | {"inputs_hash": data["inputs_hash"]},
            )
            return
        if paid["paid"]:
            who = auth.approver(auth.operator(ctx, eng, "rag ingest (paid extraction)"), approved_by)
            approval = operator_approval(PAID_AUTOMATION, approved_by=who, reason=reason, inputs_hash=inputs_hash)
            require_ingest_approval(eng, paid, approval, audit=audit_trail(eng), actor=who or None)
    elif estimate:
        raise typer.BadParameter("--estimate shows the extraction estimate: leave out --no-extract")
    summary: dict[str, dict[str, Any]] = {}
    with RichIngestProgress(err(), live=progress_wanted(ctx)) as observer:
        if not progress_wanted(ctx) and not json:
            observer.console.print(f"ingesting {', '.join(p.name for p in packs)}", markup=False)
        for p in packs:
            started = time.perf_counter()
            reports = ingest_pack(eng, p, extract=not no_extract, skip_unchanged=not force, observer=observer)
            summary[p.name] = {
                "steps": {name: asdict(r) for name, r in reports.items()},
                "totals": _ingest_totals(reports),
                "seconds": round(time.perf_counter() - started, 3),
            }
    broken = {} if pack else {name: str(exc) for name, exc in eng.broken_packs.items()}  # asked for all: not done
    failed = (
        sum(len(r["failed"]) + len(r["rejected"]) for s in summary.values() for r in s["steps"].values())
        + sum(s["totals"]["extraction_failed_calls"] for s in summary.values())
        + len(broken)
    )
    left = sum(s["totals"]["extraction_budget_skipped"] for s in summary.values())
    exit_code = CHECK_FAILED if failed or left else 0
    if json:
        emit_json(
            ctx,
            {
                "packs": summary,
                "broken_packs": broken,
                "failed": failed,
                "extraction_chunks_left": left,
                "exit_code": exit_code,
            },
        )
    else:
        render.ingest_summary(out(), summary)
        if failed:
            err().print(
                f"ingest finished with {failed} failure(s) (rejected documents, failed partitions, "
                "extraction calls or broken packs): exit 1",
                style="red",
                markup=False,
            )
        if left:
            err().print(
                f"ingest partial: the extraction run budget left {left} chunk(s) unextracted; their documents "
                "are not stamped, so the next `rag ingest` (or Dagster run) continues them: exit 1",
                style="yellow",
                markup=False,
            )
    if exit_code:
        raise typer.Exit(exit_code)


# -- costs / status ---------------------------------------------------------------------------


def costs(
    ctx: typer.Context,
    run_id: Annotated[str | None, typer.Option("--run-id", help="Only this run's calls.")] = None,
    by_model: Annotated[
        bool,
        typer.Option(
            "--by-model",
            help="Quality per dollar by generation model: nDCG@10 and citation hit rate from eval reports, "
            "cost per query from the ledger's measured tokens at current prices, cost per hour at "
            "costs.query_rate_per_hour; extraction and indexing spend apart.",
        ),
    ] = False,
    by_actor: Annotated[
        bool,
        typer.Option(
            "--by-actor",
            help="Rows by provider, model and actor (the principal the calls were made for; (none) for "
            "ingestion, scheduled runs and queries without a key) instead of by run.",
        ),
    ] = False,
    json: JsonOpt = False,
) -> None:
    """Usage and cost from the ledger, by provider, model and run (unknown costs stay unknown).

    With principals configured: an operator's key (RAG_KEY)."""
    use_json(ctx, json)
    eng = engine(ctx)
    auth.operator(ctx, eng, "rag costs")
    if by_model and by_actor:
        raise typer.BadParameter("choose one of --by-model, --by-actor", param_hint="--by-actor")
    if by_model:
        from rag_engine.ops.quality_per_dollar import by_model as table_by_model
        from rag_engine.ops.quality_render import as_json, render
        from rag_engine.providers.ledger import ledger_url

        if run_id is not None:
            raise typer.BadParameter("--by-model reads the whole ledger; leave out --run-id", param_hint="--run-id")
        table = table_by_model(eng.cfg, eng.root, ledger_url(eng.cfg, eng.env, eng.root))
        if json:
            emit_json(ctx, as_json(table))
        else:
            for part in render(table):
                out().print(part, markup=False)
        return
    from rag_engine.ops.costs import costs_summary, costs_table, costs_totals

    summary = costs_summary(eng.cfg, eng.root, run_id=run_id, env=eng.env, by_actor=by_actor)
    if json:
        emit_json(ctx, {k: summary[k] for k in ("run_id", "by", "rows", "totals")})
        return
    console = out(wide=True)
    if not summary["rows"]:
        console.print("no usage recorded" + (f" for run {run_id}" if run_id else ""), markup=False)
        return
    console.print(costs_table(summary))
    for line in costs_totals(summary):
        console.print(line, markup=False)


def status(ctx: typer.Context, json: JsonOpt = False) -> None:
    """The system on one screen: index, packs, graph quality, eval gate, spend, automation.

    Config hash, embedder and index state, packs with document/chunk counts, graph quality
    (blocking checks first), the latest eval gate, spend by model (24 h, all time) and the
    automation state when DAGSTER_HOME is set. With principals configured: an operator's key (RAG_KEY).
    With Neo4j unreachable: everything that lives elsewhere (config, corpus files, eval gate, spend,
    automation), the store as one line on stderr, exit 2 (in --json: the document with "error")."""
    from rag_engine.ops.status import collect_status

    use_json(ctx, json)
    eng = engine(ctx)
    auth.operator(ctx, eng, "rag status")  # before the store is touched
    data = collect_status(eng)
    store = data["store"]
    down = (
        None if store["reachable"] else {"type": "StoreUnavailable", "message": store["error"], "exit_code": BAD_INPUT}
    )
    if json:
        emit_json(ctx, {**data, "error": down} if down else data)
    else:
        render.status(out(), data)
    if down:
        err().print(f"error: StoreUnavailable: {down['message']}", style="red", markup=False)
        raise typer.Exit(BAD_INPUT)


__all__ = [
    "BAD_INPUT",
    "cleanup",
    "config_app",
    "costs",
    "feedback",
    "ingest",
    "packs_app",
    "quality",
    "query",
    "reindex",
    "status",
]
