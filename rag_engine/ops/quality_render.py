"""Quality per dollar as shown: the table of ``rag costs --by-model`` (rich), its cells and notes,
and its JSON form; the figures come from ``rag_engine.ops.quality_per_dollar``."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from rag_engine.ops.quality_per_dollar import CostTable, ModelRow


def money(value: Decimal | None, places: int = 6) -> str:
    return "unknown" if value is None else f"{value:.{places}f}"


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def as_json(table: CostTable) -> dict[str, Any]:
    """JSON-safe: Decimal as exact text, unknown as null."""
    return table.model_dump(mode="json")


def row_cells(r: ModelRow) -> list[str]:
    """One row as shown: unknown said plainly, a zero cost as free, an estimated cost marked."""
    if r.cost_per_query is not None and r.cost_per_query == 0 and r.fact_stated_rate is not None:
        qpd = "free"
    else:
        qpd = _num(r.quality_per_dollar, ",.0f") if r.quality_per_dollar is not None else "unknown"
    guess = "~" if r.tokens_projected_from else ""  # projected from another model's answer calls
    est = " est." if r.tokens_estimated else ""  # priced from token counts no provider reported
    stated = "-" if r.fact_stated_rate is None else f"{r.fact_stated_rate:.3f} of {r.fact_questions}"
    return [
        r.model + (" *" if r.default else ""),
        ", ".join(r.answered_as) or ("-" if r.answers is None else "(not named)"),
        stated,
        str(r.answer_calls),
        "-"
        if r.input_tokens_per_query is None
        else f"{guess}{r.input_tokens_per_query:.0f}/{r.output_tokens_per_query:.0f}{est}",
        guess + money(r.cost_per_query) + (est if r.cost_per_query is not None else ""),
        qpd,
        (guess if r.cost_per_hour is not None else "") + money(r.cost_per_hour, 4),
        r.priced_by or "unknown",
    ]


ROW_HEADERS = (
    "model",
    "answered as",
    "fact stated",
    "answer calls",
    "tokens/query in/out",
    "cost/query",
    "facts stated per $",
    "cost/hour",
    "priced by",
)


def model_table(rows: Iterable[ModelRow], title: str) -> Any:
    """The rows as a rich table."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for i, h in enumerate(ROW_HEADERS):
        last = i == len(ROW_HEADERS) - 1  # the rate stays on one line; headers of numbers may wrap
        table.add_column(h, justify="left" if i == 0 or last else "right", no_wrap=i == 0 or last)
    for r in rows:
        table.add_row(*row_cells(r))
    return table


def render(table: CostTable) -> list[Any]:
    """Rich renderables for ``rag costs --by-model``."""
    from rich.table import Table

    cur = table.currency
    out: list[Any] = [
        model_table(
            table.rows,
            f"quality per dollar by generation model ({cur}; pricing {table.pricing_version or 'none'}; "
            f"{table.query_rate_per_hour:g} queries/hour)",
        )
    ]
    lines = [
        f"* the default generation model. cost/query = the model's answer calls at current prices (the pricing "
        f"file, or its provider's machine-time rate: priced by) + shared query-side calls "
        f"({money(table.rows[0].shared_cost_per_query) if table.rows else '-'} {cur}). "
        "~ projected: tokens of another model's answers to the same prompts. est.: priced from token counts "
        "no provider reported (a replay fixture's characters / 4). fact stated: the share of the answers it "
        "wrote, to questions with a known fact, that state it (the eval report's answers)."
    ]
    for r in table.rows:
        lines += [f"{r.model}: {n}" for n in r.notes]
    lines += list(table.notes)
    out.append("\n".join(lines))
    spend = Table(
        title="recorded spend by purpose (extraction and indexing are not per-query cost)", title_justify="left"
    )
    heads = ("kind", "purpose", "provider", "model", "calls", "tokens in/out", f"cost {cur}", "unknown-cost calls")
    for h in (*heads, "est."):  # calls priced from estimated token counts
        spend.add_column(h, justify="right" if h.startswith(("calls", "tokens", "cost", "unknown", "est")) else "left")
    for s in sorted(table.spend, key=lambda s: (s.kind, s.purpose, s.provider, s.model)):
        spend.add_row(
            s.kind,
            s.purpose,
            s.provider,
            s.model,
            str(s.calls),
            f"{s.input_tokens}/{s.output_tokens}",
            money(s.cost) + (" est." if s.estimated_calls else ""),
            str(s.unknown_cost_calls),
            str(s.estimated_calls),
        )
    if not table.spend:
        out.append("no usage recorded in the ledger")
        return out
    out.append(spend)
    out.append(
        "spend by kind: "
        + ", ".join(f"{k} {money(v)}" for k, v in table.spend_totals.items())
        + f" {cur} (known costs only; unknown-cost calls are counted, never added as 0)"
    )
    return out
