"""`rag audit`: list and filter the audit trail; `rag audit purge`: the approved retention deletion."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from rag_engine.cli import auth
from rag_engine.cli.common import JsonOpt, emit_json, engine, err, out, use_json

audit_app = typer.Typer(
    help="The append-only audit trail (queries, governance events, approvals), in the ledger database.\n\n"
    "Without a sub-command: list the newest 50 matching records (--limit N, --all), oldest first. With principals "
    "configured (serving.principals) every audit command needs an operator's key (RAG_KEY).",
    invoke_without_command=True,
)


DEFAULT_LIMIT = 50
"""`rag audit` lists the newest 50 matching records unless told otherwise (--limit, --all): a trail
of every query ever asked is not a screen."""


def _summary(rec: Any) -> str:
    p = rec.payload
    if rec.event == "query":
        ans = p.get("answer") or {}
        q = "(redacted: sensitive collections)" if p.get("question_redacted") else repr((p.get("question") or "")[:60])
        return (
            f"q={q} permitted={','.join(p.get('collections_permitted', []))} "
            f"blocked={','.join(p.get('collections_blocked', [])) or '-'} candidates={len(p.get('candidates', []))} "
            f"cited={len(p.get('cited', []))} answer={ans.get('kind')}/{ans.get('method')} "
            f"model_calls={p.get('model_calls')}"
        )
    if rec.event.startswith("approval_"):
        return (
            f"action={p.get('action')} hash={str(p.get('inputs_hash') or '-')[:12]} "
            f"expected={str(p.get('expected_inputs_hash'))[:12]} reason={p.get('reason')!r}"
            + (f" refused={p['refused']}" if p.get("refused") else "")
        )
    return " ".join(f"{k}={v}" for k, v in sorted(p.items()))


@audit_app.callback()
def audit_list(
    ctx: typer.Context,
    session: Annotated[str | None, typer.Option("--session", help="Only this session id.")] = None,
    role: Annotated[str | None, typer.Option("--role", help="Only queries and events of this role.")] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Only records since: 7d, 24h, 30m, a date or an ISO date-time (UTC).")
    ] = None,
    event: Annotated[
        str | None,
        typer.Option(
            "--event",
            help="Only this event: query, collections_blocked, "
            "generation_fallback, local_inference_degraded, freshness_breach, "
            "approval_granted, approval_refused, "
            "audit_records_deleted.",
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, help=f"Only the newest N matching records (default {DEFAULT_LIMIT}).")
    ] = DEFAULT_LIMIT,
    every: Annotated[bool, typer.Option("--all", help="Every matching record (no --limit).")] = False,
    json: JsonOpt = False,
) -> None:
    """List audit records, the newest 50 by default, oldest first (read-only; needs no approval)."""
    if ctx.invoked_subcommand is not None:
        return
    from rag_engine.governance.audit import audit_trail, parse_since

    use_json(ctx, json)
    eng = engine(ctx)
    auth.operator(ctx, eng, "rag audit")
    records = audit_trail(eng).records(  # one more than shown: whether older ones were left out
        session_id=session,
        role=role,
        event=event,
        limit=None if every else limit + 1,
        since=parse_since(since) if since else None,
    )
    more = not every and len(records) > limit
    records = records[1:] if more else records
    if json:
        emit_json(
            ctx,
            {
                "records": [r.model_dump(mode="json") for r in records],
                "count": len(records),
                "limit": None if every else limit,
                "older_left_out": more,
            },
        )
        return
    from rich.table import Table

    shown = f"the newest {len(records)} record(s), older ones left out (--limit N, --all)" if more else None
    table = Table(title=f"audit trail: {shown or f'{len(records)} record(s)'}")
    for col in ("id", "at (UTC)", "event", "session", "role", "actor", "query", "details"):
        table.add_column(col, overflow="fold")
    for r in records:
        table.add_row(
            str(r.id),
            r.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            r.event,
            r.session_id or "-",
            r.role or "-",
            r.actor or "-",
            (r.query_id or "-")[:8],
            _summary(r),
        )
    out().print(table)


@audit_app.command("purge")
def audit_purge(
    ctx: typer.Context,
    approved_by: Annotated[
        str,
        typer.Option(
            "--approved-by",
            help="Who approves the deletion (required unless --dry-run). With principals configured: the "
            "operator key's principal (RAG_KEY), which this may only repeat.",
        ),
    ] = "",
    reason: Annotated[str, typer.Option("--reason", help="Why (required unless --dry-run).")] = "",
    inputs_hash: Annotated[
        str | None,
        typer.Option(
            "--inputs-hash",
            help="The inputs_hash a --dry-run printed: the deletion runs only if the plan still hashes to it.",
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be deleted and its inputs_hash.")] = False,
    json: JsonOpt = False,
) -> None:
    """Delete records older than audit.retention_days: an approved action (refused, nothing deleted, without one)."""
    from rag_engine.governance.approvals import DELETE_AUDIT_RECORDS, operator_approval
    from rag_engine.governance.approvals import inputs_hash as hash_of
    from rag_engine.governance.audit import audit_trail

    use_json(ctx, json)
    eng = engine(ctx)
    op = auth.operator(ctx, eng, "rag audit purge")
    approved_by = auth.approver(op, approved_by)
    trail, days = audit_trail(eng), eng.cfg.audit.retention_days
    data: dict[str, Any]
    if dry_run:
        plan = trail.deletion_plan(days)
        data = {"would_delete": plan, "inputs_hash": hash_of(plan)}
    else:
        approval = operator_approval(
            DELETE_AUDIT_RECORDS, approved_by=approved_by, reason=reason, inputs_hash=inputs_hash
        )
        data = trail.delete_expired(days, approval)
    if json:
        emit_json(ctx, data)
    else:
        for k, v in (data.get("would_delete") or data).items():
            out().print(f"{k}: {v}", markup=False)
        if dry_run:
            out().print(f"inputs_hash: {data['inputs_hash']}", markup=False)
            err().print(
                f"approve with: rag audit purge {auth.approve_as(op)}--reason WHY --inputs-hash {data['inputs_hash']}",
                markup=False,
            )


def mount(app: typer.Typer) -> None:
    app.add_typer(audit_app, name="audit")
