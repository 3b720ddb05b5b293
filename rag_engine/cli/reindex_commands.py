"""`rag reindex`: the blue/green re-index to the configured embedder, a thin command over
``rag_engine.ingest.reindex`` (mounted by ``cli.app`` through ``cli.commands``).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from rag_engine.cli import auth
from rag_engine.cli.common import JsonOpt, emit_json, engine, engine_store_check, err, out, progress_wanted, use_json


def reindex(
    ctx: typer.Context,
    keep_old: Annotated[
        bool, typer.Option("--keep-old", help="Keep the retired index and its vectors (switching back is then cheap).")
    ] = False,
    approved_by: Annotated[
        str,
        typer.Option(
            "--approved-by",
            help="Who approves the cut-over (needed unless a gate passed for it). With principals "
            "configured: the operator key's principal (RAG_KEY), which this may only repeat.",
        ),
    ] = "",
    reason: Annotated[str, typer.Option("--reason", help="Why the cut-over is approved.")] = "",
    inputs_hash: Annotated[
        str | None,
        typer.Option(
            "--inputs-hash", help="The inputs_hash a --dry-run printed: switch only if the plan is unchanged."
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show the cut-over plan (from, to, gate evidence) and its inputs_hash.")
    ] = False,
    json: JsonOpt = False,
) -> None:
    """Blue/green re-index to the configured embedder; queries keep the old index until the switch.

    The switch is an approved action (--approved-by, --reason) unless an eval gate passed for the
    new embedder; without either the new index is built and the switch refused (ApprovalRequired).
    With principals configured: an operator's key (RAG_KEY), whose principal is the approver."""
    from rag_engine.governance.approvals import REINDEX_CUTOVER, operator_approval
    from rag_engine.governance.approvals import inputs_hash as hash_of
    from rag_engine.ingest.reindex import GATE_PASSED, cutover_plan, render_text, run_reindex

    use_json(ctx, json)
    eng = engine(ctx)
    op = auth.operator(ctx, eng, "rag reindex")  # before the store
    approved_by = auth.approver(op, approved_by)
    engine_store_check(ctx, eng)
    plan = cutover_plan(eng)
    if dry_run:
        gate = (plan or {}).get("gate") or {}
        data = {
            "cutover": plan,
            "inputs_hash": hash_of(plan) if plan else None,
            "approval_needed": plan is not None and gate.get("status") not in GATE_PASSED,
        }
        if json:
            emit_json(ctx, data)
        elif plan is None:
            out().print("re-index dry run: no cut-over due (the configured embedder is active, or nothing is indexed)")
        else:
            out().print(f"re-index dry run: cut-over {plan['from']} -> {plan['to']}", markup=False)
            out().print(f"gate evidence: {plan['gate'] or 'none for the new embedder'}", markup=False)
            if data["approval_needed"]:
                out().print(f"inputs_hash: {data['inputs_hash']}", markup=False)
                err().print(
                    f"approve with: rag reindex {auth.approve_as(op)}--reason WHY --inputs-hash {data['inputs_hash']}",
                    markup=False,
                )
        return
    approval = None
    if plan is not None:
        approval = operator_approval(REINDEX_CUTOVER, approved_by=approved_by, reason=reason, inputs_hash=inputs_hash)
    live = progress_wanted(ctx)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn("re-index {task.fields[phase]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeRemainingColumn(),
        console=err(),
        disable=not live,
    ) as bar:
        task = bar.add_task("reindex", total=None, phase="", note="")

        def progress(p: Any) -> None:
            bar.update(
                task,
                total=p.total or None,
                completed=p.done,
                phase=p.phase,
                note=f"{p.cache_hits} cached, {p.embedded} embedded",
            )

        report = run_reindex(eng, progress=progress, drop_old=not keep_old, approval=approval)
    if json:
        emit_json(ctx, report.model_dump(mode="json"))
    else:
        out().print(render_text(report), markup=False)
