"""`rag quality`, `rag cleanup` and `rag feedback`: the graph's report, its approved cleanup and
path feedback, each a thin command over ``rag_engine.graph`` (mounted by ``cli.app`` through
``cli.commands``).
"""

from __future__ import annotations

import time
from enum import Enum
from typing import Annotated

import typer

from rag_engine.cli import auth, render
from rag_engine.cli.common import CHECK_FAILED, JsonOpt, emit_json, engine, engine_store_check, err, out, use_json


def quality(ctx: typer.Context, json: JsonOpt = False) -> None:
    """Graph quality report (read-only); exit 1 when a blocking check fails.

    Blocking: orphan entities, dangling edges, missing provenance, key conflicts (a document's own
    key, e.g. a KB id, answered by another document; examples listed)."""
    from rag_engine.graph.quality import quality_report
    from rag_engine.ops.status import blocking_failures, quality_checks

    use_json(ctx, json)
    eng = engine(ctx, store=True)
    report = quality_report(eng.driver, eng.database, sorted(eng.packs))
    failing = blocking_failures(report)
    if json:
        emit_json(ctx, {**report, "checks": quality_checks(report), "blocking_failures": failing})
    else:
        render.quality(out(), report, quality_checks(report))
        if failing:
            hint = (
                "; key conflicts: remove or correct the claiming document, then `rag ingest`"
                if "no_key_conflicts" in failing
                else ""
            )
            err().print(
                f"blocking checks fail: {', '.join(failing)}; see `rag cleanup --dry-run`{hint}",
                style="red",
                markup=False,
            )
    if failing:
        raise typer.Exit(CHECK_FAILED)


def cleanup(
    ctx: typer.Context,
    approved_by: Annotated[
        str,
        typer.Option(
            "--approved-by",
            help="Who approves the removal (required unless --dry-run). With principals configured: the "
            "operator key's principal (RAG_KEY), which this may only repeat.",
        ),
    ] = "",
    reason: Annotated[str, typer.Option("--reason", help="Why (required unless --dry-run).")] = "",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would be removed; change nothing.")] = False,
    inputs_hash: Annotated[
        str | None,
        typer.Option(
            "--inputs-hash", help="The inputs_hash a --dry-run printed: remove only if the plan is unchanged."
        ),
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Remove stale graph paths (orphans, dangling edges, superseded chunks): needs --approved-by and --reason.

    With principals configured: an operator's key (RAG_KEY), whose principal is the approver."""
    from rag_engine.governance.approvals import GRAPH_CLEANUP, operator_approval
    from rag_engine.governance.approvals import inputs_hash as hash_of
    from rag_engine.governance.audit import audit_trail
    from rag_engine.graph.cleanup import cleanup_inputs, run_cleanup

    use_json(ctx, json)
    eng = engine(ctx)
    approved_by = auth.approver(auth.operator(ctx, eng, "rag cleanup"), approved_by)  # before the store
    engine_store_check(ctx, eng)
    packs = list(eng.packs)
    plan = cleanup_inputs(eng.driver, eng.database, packs)
    if dry_run:
        data = {"would_remove": plan["plan"], "inputs_hash": hash_of(plan)}
        emit_json(ctx, data) if json else render.counts(
            out(), "cleanup dry run: would remove", data["would_remove"] | {"inputs_hash": data["inputs_hash"]}
        )
        return
    run_id = f"cli-{int(time.time())}"
    approval = operator_approval(
        GRAPH_CLEANUP, approved_by=approved_by, reason=reason, inputs_hash=inputs_hash, run_id=run_id
    )
    data = run_cleanup(
        eng.driver, eng.database, packs, approval, run_id=run_id, audit=audit_trail(eng), actor=approved_by
    )
    if json:
        emit_json(ctx, data)
    else:
        render.counts(
            out(),
            "cleanup",
            {k: v for k, v in data.items() if not isinstance(v, dict)}
            | {f"removed {k}": v for k, v in (data.get("removed") or {}).items()},
        )


class Verdict(str, Enum):
    useful = "useful"
    harmful = "harmful"


def feedback(
    ctx: typer.Context,
    path_id: Annotated[str, typer.Option("--path-id", help="The path id `rag query` prints for a graph candidate.")],
    role: Annotated[str, typer.Option("--role", help="The caller's role: only paths it may read can be judged.")],
    verdict: Annotated[Verdict, typer.Option("--verdict", help="Whether the path helped or misled.")],
    actor: Annotated[str, typer.Option("--actor", help="Who gives the feedback.")],
    note: Annotated[str, typer.Option("--note", help="Free text.")] = "",
    query_text: Annotated[str | None, typer.Option("--query", help="The question the path answered.")] = None,
    json: JsonOpt = False,
) -> None:
    """Record diagnostic feedback on a graph path as an (:Observation); never changes facts."""
    from rag_engine.governance.policy import gate
    from rag_engine.graph.feedback import decode_path_id, record_feedback

    use_json(ctx, json)
    eng = engine(ctx, store=True)
    decision = gate(eng.cfg, role)  # as the role: a path it may not read is as unknown as a missing one
    obs = record_feedback(
        eng.driver,
        eng.database,
        path=decode_path_id(path_id),
        verdict=verdict.value,
        note=note,
        actor=actor,
        query=query_text or "",
        collections=decision.collections,
    )
    if json:
        emit_json(ctx, obs.model_dump(mode="json"))
    else:
        render.kv(
            out(),
            "feedback recorded",
            {k: v for k, v in obs.model_dump(mode="json").items() if not isinstance(v, (list, dict))},
        )
