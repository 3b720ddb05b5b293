"""Human rendering of command results (rich), apart from the commands that compute them.

Each function takes plain data (models or dicts) and a console; none computes anything the JSON
output would not also hold.
"""

from __future__ import annotations

import textwrap
from decimal import Decimal
from typing import Any

from rich.console import Console
from rich.markup import escape as _markup_escape
from rich.table import Table

from rag_engine.text.controls import strip_controls
from rag_engine.usage import shown_cost


def escape(text: str) -> str:
    """Text from documents, questions or the store, safe to print: no rich markup, and no terminal
    control sequence (a document's ``\x1b]0;...\x07`` retitled the window, ``\x1b[2J`` cleared it)."""
    return _markup_escape(strip_controls(text))


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold", header_style="bold")
    for col in columns:  # short columns keep their header on one line; long text folds
        long = col in _LONG
        table.add_column(col, overflow="fold", no_wrap=not long, min_width=None if long else len(col))
    return table


_LONG = {"value", "cite", "heading", "via", "model", "reasons"}


def kv(console: Console, title: str, rows: dict[str, Any]) -> None:
    table = _table(title, "key", "value")
    for key, value in rows.items():
        table.add_row(key, escape(str(value)))
    console.print(table)


# -- query ----------------------------------------------------------------------------------


def fallback_note(outcome: Any) -> str | None:
    """Why the answer is not the generation model's, in words (None when the model answered)."""
    ans = outcome.answer
    if ans.method == "model":
        return None
    if ans.insufficient_evidence:
        return f"insufficient evidence ({ans.reason})"
    if ans.error_type:
        return f"generation model failed ({ans.error_type}): extractive answer, quoting the passages"
    if ans.method == "extractive":
        why = {
            "no_recording": "the replay holds no recorded answer for this question",
            "no_generation_model": "no generation model configured",
        }.get(ans.fallback or "", "no generation model call")
        return f"extractive answer: the sentences of the top passages that answer the question ({why})"
    return f"no answer ({ans.reason})" if ans.reason else None


def query(console: Console, outcome: Any) -> None:
    from rag_engine.graph.feedback import encode_path_id

    result = outcome.retrieval
    p = console.print
    p(f"query: {escape(result.query)}")
    p(f"role: {escape(result.role)} -> collections {list(result.collections)}")
    plan = result.plan or {}
    seeds = ", ".join(s["name"] for s in plan.get("seeds", []))
    p(
        escape(
            f"plan: {plan.get('reason', 'n/a')}"
            + (f" (seeds: {seeds})" if seeds else "")
            + (f" - {plan['detail']}" if plan.get("detail") else "")
        )
    )
    for ev in outcome.events:
        p(escape(f"event: {ev}"), style="dim")
    table = _table("candidates", "#", "score", "sources", "exact", "cite", "heading")
    for i, c in enumerate(result.candidates, 1):
        table.add_row(
            str(i),
            f"{c.score:.4f}",
            "/".join(c.sources),
            "yes" if c.exact else "",
            escape(c.chunk_id),
            escape(c.heading),
        )
    p(table)
    for i, c in enumerate(result.candidates, 1):
        p(f"\n[bold][{i}][/bold] {escape(c.chunk_id)}" + (f" via {escape(c.via)}" if c.via else ""))
        if c.path:
            hops = " ; ".join(
                f"{h['seed'] if j == 0 else ''}-[{h['type']} {h['confidence']:.2f}]-{h['to_name']}"
                for j, h in enumerate(c.path)
            )
            p(escape(f"    path (score {c.path_score:.3f}): {hops}"))
            p(escape(f"    feedback path id: {encode_path_id(c.path)}"))
        if c.provenance:
            pv = c.provenance
            p(
                escape(
                    f"    live: {pv.source} {pv.table} key={pv.key} committed_at={pv.committed_at.isoformat()} "
                    f"retrieved_at={pv.retrieved_at.isoformat()}" + (" STALE" if pv.stale else "")
                )
            )
        p(escape(textwrap.indent(textwrap.shorten(c.text, 300), "    ")))
    if result.expansions:
        exp = _table("reference expansions (context only, not ranked)", "score", "via", "cite", "heading")
        for c in result.expansions:
            exp.add_row(f"{c.score:.4f}", escape(c.via or ""), escape(c.chunk_id), escape(c.heading))
        p(exp)
    ans = outcome.answer
    p("\n[bold]answer[/bold]" + escape(f" ({ans.method}" + (f", {ans.model}" if ans.model else "") + "):"))
    note = fallback_note(outcome)
    if note:
        p(escape(f"  note: {note}"), style="yellow")
    if not ans.insufficient_evidence:
        p(escape(textwrap.indent(textwrap.shorten(ans.text, 600), "  ")))
        p(escape("  citations: " + ", ".join(ans.citations)))
    if ans.dropped_citations:
        p(escape(f"  dropped citations (not in the context): {', '.join(ans.dropped_citation_ids)}"), style="yellow")
    if outcome.context.overflow:
        p(f"context overflow: {len(outcome.context.overflow)} item(s) over budget")
    p(
        escape(
            "\ntrace: "
            + ", ".join(f"{s['step']} {s['ms']}ms{_in_store(s)}" for s in result.trace)
            + f"; total {outcome.latency_ms}ms"
        ),
        style="dim",
    )


def _in_store(step: dict[str, Any]) -> str:
    """`` (store 3.1ms)``: the part of a step's time spent in store statements, where it spent any."""
    return f" (store {step['store_ms']}ms)" if step.get("store_ms") else ""


# -- ingest ---------------------------------------------------------------------------------


def ingest_summary(console: Console, packs: dict[str, dict[str, Any]]) -> None:
    """Per pack and step: partitions done / unchanged / rejected / failed and seconds."""
    table = _table(
        "ingest: per step", "pack", "step", "done", "unchanged", "rejected", "upstream rejected", "failed", "seconds"
    )
    for pack, info in packs.items():
        for step, r in info["steps"].items():
            failed = len(r["failed"])
            table.add_row(
                pack,
                step,
                str(len(r["done"])),
                str(len(r["unchanged"])),
                str(len(r["rejected"])),
                str(len(r["skipped"])),
                f"[red]{failed}[/red]" if failed else "0",
                f"{r['seconds']:.1f}",
            )
    console.print(table)
    totals = _table(
        "ingest: per pack (what this run wrote)",
        "pack",
        "documents",
        "chunks",
        "refs resolved",
        "unresolved",
        "inferred",
        "failed calls",
        "s",
    )
    for pack, info in packs.items():
        t = info["totals"]
        totals.add_row(
            pack,
            str(t["documents"]),
            str(t["chunks"]),
            str(t["resolved"]),
            str(t["unresolved"]),
            str(t["relationships"]),
            str(t["extraction_failed_calls"]),
            f"{info['seconds']:.1f}",
        )
    console.print(totals)
    problems = [
        (pack, step, key, reason)
        for pack, info in packs.items()
        for step, r in info["steps"].items()
        for kind in ("rejected", "failed")
        for key, reason in r[kind].items()
    ]
    for pack, step, key, reason in problems:
        console.print(escape(f"[{pack}] {step} {key}: {reason}"), style="red")


# -- graph ----------------------------------------------------------------------------------


def quality(console: Console, report: dict[str, Any], checks: list[dict[str, Any]]) -> None:
    table = _table(f"graph quality ({', '.join(report['packs'])})", "check", "severity", "count", "result")
    for row in checks:
        result = (
            "[green]pass[/green]"
            if row["passed"]
            else ("[red]FAIL[/red]" if row["severity"] == "blocking" else "[yellow]warn[/yellow]")
        )
        table.add_row(row["check"], row["severity"], "" if row["count"] is None else str(row["count"]), result)
    console.print(table)
    size, low = report["graph_size"], report["low_confidence"]
    console.print(
        f"edges: {size['deterministic']} deterministic, {size['inferred']} inferred "
        f"({low['eligible']} retrieval-eligible, {low['count']} below the confidence floor)"
    )
    latest = report.get("latest_run")
    if latest:
        console.print(
            escape(
                f"latest extraction run: {latest['run_id']} ({latest['pack']}) {latest['status']}, "
                f"{latest['llm_calls']} chunks, {latest['cache_hits']} cache hits, {latest['finished_at']}"
            )
        )
    if report.get("cleanup"):
        c = report["cleanup"]
        console.print(escape(f"last cleanup: {c['at']} by {c['approved_by']}: {c['reason']}"))
    if report["orphan_entities"]["sample"]:
        console.print(escape(f"orphan sample: {', '.join(map(str, report['orphan_entities']['sample']))}"), style="dim")
    for c in report["key_conflicts"]["sample"]:
        claimants = [*c["owners"][1:], *c["others"]]
        console.print(
            escape(f"key conflict [{c['pack']}] {c['key']}: owned by {c['owners'][0]}, also {', '.join(claimants)}"),
            style="red",
        )


def counts(console: Console, title: str, data: dict[str, Any]) -> None:
    table = _table(title, "what", "count")
    for key, value in data.items():
        table.add_row(key, escape(str(value)))
    console.print(table)


# -- status ---------------------------------------------------------------------------------


def _cost(window: dict[str, Any]) -> str:
    """A spend cell: the total, or "unknown" (with the known part) when a call's cost is unknown."""
    if window["cost"] is not None:
        return shown_cost(window["cost"]) or "0"  # rounded (usage.shown_cost); --json has the exact sum
    known = window.get("known_cost", "0")
    return "unknown" if Decimal(known) == 0 else f"unknown (>= {shown_cost(known)})"


def status(console: Console, s: dict[str, Any]) -> None:
    p = console.print
    emb = s["embedder"]
    p(f"[bold]config[/bold] {s['config_hash']}")
    if emb is None:  # the store is unreachable: one line, then what lives elsewhere
        p(escape(f"store: unreachable: {s['store']['error']}"), style="red")
    else:
        ok = emb["state"] == "ok"
        p(escape(f"embedder: {emb['active_identity']}"))
        p(
            f"index: {'[green]' if ok else '[yellow]'}{escape(emb['state'])}{'[/green]' if ok else '[/yellow]'} "
            f"({emb['embedded']}/{emb['chunks']} current chunks in the vector index"
            + (
                escape(f"; built by {emb['index_identity']}, dimension {emb['dimension']}")
                if emb["index_identity"]
                else ""
            )
            + ")"
        )
    packs = _table("packs", "pack", "domain", "extraction", "corpus files", "documents", "chunks", "embedded")
    for row in s["packs"]:
        packs.add_row(
            row["pack"],
            row["domain"],
            "on" if row["extraction"] else "off",
            str(row["corpus_documents"]),
            *("?" if row[k] is None else str(row[k]) for k in ("documents", "chunks", "embedded")),
        )
    p(packs)
    for row in s.get("stored_packs") or []:
        if not row["enabled"]:
            p(
                escape(
                    f"in the store, not enabled (never served): {row['pack']}: {row['documents']} documents, "
                    f"{row['active_chunks']} current chunks of {row['chunks']}"
                ),
                style="yellow",
            )
    for name, error in s.get("broken_packs", {}).items():
        p(f"[red]broken pack[/red] {escape(name)}: {escape(error)}")
    q = _table("graph quality (blocking first)", "check", "severity", "count", "result")
    for row in (s["quality"] or {}).get("checks", []):
        result = (
            "[green]pass[/green]"
            if row["passed"]
            else ("[red]FAIL[/red]" if row["severity"] == "blocking" else "[yellow]warn[/yellow]")
        )
        q.add_row(row["check"], row["severity"], "" if row["count"] is None else str(row["count"]), result)
    p(q if s["quality"] is not None else "graph quality: unknown (the store is unreachable)")
    gate = s["eval_gate"]
    if gate is None:
        p("eval gate: none yet (run `make eval-gate`, or eval_report and its eval_gate check in Dagster)")
    else:
        colour = "green" if gate["status"] in ("pass", "accepted") else "red"
        p(
            f"eval gate: [{colour}]{escape(str(gate['status']))}[/{colour}] ({escape(gate['path'])}"
            + (f", {escape(gate['recorded_by'])}" if gate.get("recorded_by") else "")
            + (f", {gate['at']}" if gate.get("at") else "")
            + ")"
        )
        for reason in gate["reasons"]:
            p(escape(f"  {reason}"), style="dim")
    spend = _table(
        "spend by model", "model", "provider", "calls 24h", "cost 24h", "calls all", "cost all", "unknown cost"
    )
    for row in s["spend"]["models"]:
        spend.add_row(
            escape(row["model"]),
            row["provider"],
            str(row["day"]["calls"]),
            _cost(row["day"]),
            str(row["all"]["calls"]),
            _cost(row["all"]),
            str(row["all"]["unknown_cost_calls"]),
        )
    if s["spend"].get("error"):
        p(escape(f"spend: unavailable: {s['spend']['error']}"), style="red")
    else:
        p(spend if s["spend"]["models"] else "spend: no usage recorded")
    auto = s["automation"]
    if auto is None:
        p(
            "automation: no Dagster instance (DAGSTER_HOME unset, no var/dagster_home: "
            "`make demo` or `make dev` makes one)"
        )
    else:
        on = [i["name"] for i in auto["instigators"] if i["on"]]
        p(
            escape(
                f"automation ({auto['dagster_home']}, {auto['source']}): {len(on)} schedule(s)/sensor(s) on"
                + (f": {', '.join(map(str, on))}" if on else "")
                + (f"; {auto['note']}" if auto.get("note") else "")
            )
        )
        for run in auto["runs"]:
            p(escape(f"  run {run['run_id']} {run['job']} {run['status']} {run['updated']}"), style="dim")
