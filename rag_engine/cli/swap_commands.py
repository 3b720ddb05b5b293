"""`rag providers swap`: the provider replacement dry run (rag_engine.ops.swap).

Mounted by ``app._mount_optional``. Exit codes: 0 the swap is possible (status ok), 1 it is blocked
(missing credential, unreachable local endpoint, capability loss, the candidate config does not
load), 2 bad input (unknown role or model, unreadable candidate config).
"""

from __future__ import annotations

from typing import Annotated

import typer

from rag_engine.cli.common import CHECK_FAILED, JsonOpt, emit_json, engine, err, out, state, use_json

providers_app = typer.Typer(
    help="Model providers: compare a candidate with the current one (dry run).", no_args_is_help=True
)


@providers_app.command("swap")
def swap(
    ctx: typer.Context,
    role: Annotated[str, typer.Option("--role", help="generation | embedding | extraction | local_inference")],
    candidate: Annotated[
        str | None,
        typer.Option("--candidate", metavar="MODEL", help="A configured model to put in the role's default."),
    ] = None,
    candidate_config: Annotated[
        str | None,
        typer.Option(
            "--candidate-config",
            metavar="FILE",
            help="A whole candidate engine config (relative to the project root) to compare for this role.",
        ),
    ] = None,
    no_sample: Annotated[
        bool,
        typer.Option(
            "--no-sample",
            help="Do not embed a sample through a candidate embedder (the rate then comes from the ledger).",
        ),
    ] = False,
    json: JsonOpt = False,
) -> None:
    """Dry run of a provider swap for one role: identities, credentials (names only), capability losses,
    pricing gaps, rollback, re-index / re-extraction / eval consequences; changes nothing.

    Exit 0 when the swap is possible, 1 when it is blocked, 2 on bad input."""
    from rag_engine.ops.swap.dry_run import dry_run
    from rag_engine.ops.swap.render import render_text

    use_json(ctx, json)
    eng = engine(ctx, store=role in ("embedding", "extraction"))  # their figures come from Neo4j
    report = dry_run(
        eng,
        role=role,
        candidate=candidate,
        candidate_config=candidate_config,
        config_path=state(ctx).config,
        sample=not no_sample,
    )
    if json:
        emit_json(ctx, report.model_dump(mode="json"))
    else:
        out().print(render_text(report), markup=False, soft_wrap=True)
    if report.status != "ok":
        if not json:
            err().print(f"swap blocked: {len(report.reasons)} reason(s)", style="red", markup=False)
        raise typer.Exit(CHECK_FAILED)


def mount(app: typer.Typer) -> None:
    app.add_typer(providers_app, name="providers")
