"""``rag costs``: the usage ledger summarised by provider, model and run.

Unknown costs are shown as unknown, never as 0, and the ledger URL (which may hold a database
password) is never printed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd

from rag_engine.config import EngineConfig
from rag_engine.errors import ConfigError
from rag_engine.providers.ledger import UsageLedger, ledger_url
from rag_engine.providers.pricing import pricing_for


def _money(value: Any) -> str:
    return "unknown" if value is None else f"{Decimal(value):.6f}"


def _plain(value: Any) -> Any:
    """JSON-safe scalars: Decimal as exact text, pandas NA as null."""
    if value is None or (not isinstance(value, (str, Decimal)) and pd.isna(value)):
        return None
    if isinstance(value, Decimal):
        return format(value, "f")
    if hasattr(value, "item"):  # numpy scalar
        return value.item()
    return value


def costs_report(
    cfg: EngineConfig,
    root: str | Path,
    run_id: str | None = None,
    as_json: bool = False,
    env: Mapping[str, str] | None = None,
) -> str:
    ledger = UsageLedger(ledger_url(cfg, os.environ if env is None else env, root))
    try:
        frame = ledger.summary_frame(run_id)
    finally:
        ledger.dispose()
    known = [c for c in frame["cost"] if c is not None] if len(frame) else []
    totals = {
        "calls": int(frame["calls"].sum()) if len(frame) else 0,
        "errors": int(frame["errors"].sum()) if len(frame) else 0,
        "cost": format(sum(known, Decimal(0)), "f") if known else None,
        "unknown_cost_calls": int(frame["unknown_cost_calls"].sum()) if len(frame) else 0,
    }
    if as_json:
        rows = [{k: _plain(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]
        return json.dumps({"run_id": run_id, "rows": rows, "totals": totals}, indent=2, sort_keys=True)
    if frame.empty:
        return "no usage recorded" + (f" for run {run_id}" if run_id else "")
    shown = frame.drop(columns=["reported_models", "pricing_versions"]).copy()
    shown["cost"] = shown["cost"].map(_money)
    for col in ("cached_input_tokens", "reasoning_tokens"):
        shown[col] = shown[col].map(lambda v: "n/a" if pd.isna(v) else str(int(v)))
    lines = [shown.to_string(index=False), ""]
    total_cost = _money(Decimal(totals["cost"])) if totals["cost"] is not None else "unknown"
    try:
        currency = " " + pricing_for(cfg, root).currency
    except ConfigError:
        currency = ""
    lines.append(f"total: {totals['calls']} calls, {totals['errors']} errors, cost {total_cost}{currency}")
    if totals["unknown_cost_calls"]:
        lines.append(f"       {totals['unknown_cost_calls']} call(s) with unknown cost are not included in the total")
    return "\n".join(lines)
