"""``rag costs``: the usage ledger summarised by provider, model and run (or principal: ``by_actor``).

Unknown costs are shown as unknown, never as 0, a cost priced from estimated token counts (a
fixture's characters / 4, no provider reported them) is marked "estimated", and the ledger URL
(which may hold a database password) is never printed. Each row names the pricing versions its
calls were priced under: a pricing file's, or a local provider's machine-time rate (``local_cost``).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from rag_engine.config import EngineConfig
from rag_engine.errors import ConfigError
from rag_engine.providers.ledger import UsageLedger, ledger_url
from rag_engine.providers.pricing import pricing_for


def _money(value: Any) -> str:
    return "unknown" if value is None else f"{Decimal(value):.6f}"


def _plain(value: Any) -> Any:
    """JSON-safe scalars: Decimal as exact text."""
    return format(value, "f") if isinstance(value, Decimal) else value


def costs_summary(
    cfg: EngineConfig,
    root: str | Path,
    run_id: str | None = None,
    env: Mapping[str, str] | None = None,
    by_actor: bool = False,
) -> dict[str, Any]:
    """Rows per provider / model / run (JSON-safe), the totals and the pricing currency. With
    ``by_actor`` the rows are per provider / model / actor (the principal the calls were made for;
    ``(none)`` for calls no principal asked for)."""
    ledger = UsageLedger(ledger_url(cfg, os.environ if env is None else env, root))
    by = "actor" if by_actor else "run_id"
    try:
        summary = ledger.summary(run_id, by=by)
    finally:
        ledger.dispose()
    known = [r["cost"] for r in summary if r["cost"] is not None]
    totals = {
        "calls": sum(r["calls"] for r in summary),
        "errors": sum(r["errors"] for r in summary),
        "cost": format(sum(known, Decimal(0)), "f") if known else None,
        "unknown_cost_calls": sum(r["unknown_cost_calls"] for r in summary),
        "estimated_calls": sum(r["estimated_calls"] for r in summary),
    }
    try:
        currency: str | None = pricing_for(cfg, root).currency
    except ConfigError:
        currency = None
    rows = [{k: _plain(v) for k, v in row.items()} for row in summary]
    return {"run_id": run_id, "by": by, "rows": rows, "totals": totals, "currency": currency}


_COLUMNS = (
    ("provider", "provider"),
    ("requested_model", "model"),
    ("run_id", "run"),
    ("calls", "calls"),
    ("errors", "errors"),
    ("input_tokens", "input tok"),
    ("cached_input_tokens", "cached tok"),
    ("output_tokens", "output tok"),
    ("reasoning_tokens", "reasoning tok"),
    ("cost", "cost"),
    ("unknown_cost_calls", "unknown cost"),
    ("estimated_calls", "estimated"),
    ("pricing_versions", "pricing"),
)


def costs_table(summary: dict[str, Any]) -> Table:
    """The summary as one table, a row per provider / model / run; cells never wrap, so a row
    stays one line however narrow the output (a pipe gets the table's natural width)."""
    table = Table(title="usage and cost" + (f" of run {summary['run_id']}" if summary["run_id"] else ""))
    by = summary.get("by", "run_id")
    columns = [("actor", "actor") if key == "run_id" and by == "actor" else (key, h) for key, h in _COLUMNS]
    for key, header in columns:
        numeric = key not in ("provider", "requested_model", "run_id", "actor", "pricing_versions")
        table.add_column(header, justify="right" if numeric else "left", no_wrap=True)
    for row in summary["rows"]:
        cells = []
        for key, _ in columns:
            value = row.get(key)
            if key == "cost":
                cells.append(_money(value) + estimated_mark(row.get("estimated_calls"), row.get("calls")))
            elif value is None or value == "":
                cells.append("n/a")
            else:
                cells.append(str(value))
        table.add_row(*cells)
    return table


def costs_totals(summary: dict[str, Any]) -> list[str]:
    """The total line, and the unknown-cost warning when there is one."""
    totals = summary["totals"]
    total_cost = _money(totals["cost"]) if totals["cost"] is not None else "unknown"
    currency = f" {summary['currency']}" if summary["currency"] else ""
    lines = [f"total: {totals['calls']} calls, {totals['errors']} errors, cost {total_cost}{currency}"]
    if totals["unknown_cost_calls"]:
        lines.append(f"       {totals['unknown_cost_calls']} call(s) with unknown cost are not included in the total")
    if totals.get("estimated_calls"):
        lines[0] += estimated_mark(totals["estimated_calls"], totals["calls"])
        lines.append(
            f"       {totals['estimated_calls']} call(s) priced from estimated token counts (no provider reported "
            "them, e.g. a replay fixture's characters / 4): their cost is an estimate"
        )
    return lines


def estimated_mark(estimated: Any, calls: Any) -> str:
    """`` (estimated)`` when every call's token counts were estimated, `` (partly estimated)`` when
    some were, else nothing: what a cost figure rests on."""
    if not estimated:
        return ""
    return " (estimated)" if estimated == calls else " (partly estimated)"


def costs_report(
    cfg: EngineConfig,
    root: str | Path,
    run_id: str | None = None,
    as_json: bool = False,
    env: Mapping[str, str] | None = None,
) -> str:
    """The summary as text (the table at its natural width, then the totals) or as JSON."""
    summary = costs_summary(cfg, root, run_id, env)
    if as_json:
        return json.dumps({k: summary[k] for k in ("run_id", "rows", "totals")}, indent=2, sort_keys=True)
    if not summary["rows"]:
        return "no usage recorded" + (f" for run {run_id}" if run_id else "")
    console = Console(file=io.StringIO(), width=10_000, highlight=False, color_system=None)
    console.print(costs_table(summary))
    text = "\n".join(line.rstrip() for line in console.file.getvalue().splitlines())  # type: ignore[attr-defined]
    return "\n".join([text, "", *costs_totals(summary)])
