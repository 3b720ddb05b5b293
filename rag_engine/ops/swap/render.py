"""``render_text``: the swap report as the text ``rag providers swap`` prints (``--json`` prints
the report itself).

Only formatting: every figure and sentence comes from the ``SwapReport``.
"""

from __future__ import annotations

from rag_engine.ops.swap.report import Identity, Pricing, SwapReport


def _ident_lines(label: str, i: Identity) -> list[str]:
    if i.model is None:
        return [f"{label}: none (role off)"]
    cred = (
        "no credential needed"
        if i.credential_env is None
        else f"credential {i.credential_env}: {'present' if i.credential_present else 'MISSING'}"
    )
    where = f", endpoint {i.endpoint_host}" if i.endpoint_host else (f", {i.kind}" if i.kind else "")
    reach = f"; {i.reachability_note}" if i.reachability_note else ""
    return [
        f"{label}: {i.model} = {i.provider}/{i.served_model} ({i.mode}{where})",
        f"  identity {i.identity}; {cred}{reach}",
        f"  capabilities: {', '.join(i.capabilities) or '-'}",
    ]


def _price_line(label: str, p: Pricing) -> str:
    if p.known and p.input_per_million is None:  # machine time by the second
        return f"{label}: {p.price_key} {p.basis} ({p.gap})"
    if p.known and p.basis and not p.basis.startswith("pricing file"):
        return f"{label}: {p.price_key} {p.basis}"
    if p.known:
        cached = f", cached input {p.cached_input_per_million}" if p.cached_input_per_million else ""
        return (
            f"{label}: {p.price_key} input {p.input_per_million}{cached}, output {p.output_per_million} "
            f"USD per million tokens (pricing {p.pricing_version})"
        )
    return f"{label}: {p.gap}"


def render_text(report: SwapReport) -> str:
    r = report
    lines = [
        f"provider swap dry run: role {r.role} — status {r.status.upper()}",
        f"application_code_change_required: {str(r.application_code_change_required).lower()} "
        f"(engine + Dagster Definitions loaded with the candidate config in {r.load_check.seconds} s"
        + ("" if r.load_check.ok else f": {r.load_check.error}")
        + ")",
    ]
    if r.candidate_config_file:
        lines.append(f"candidate config: {r.candidate_config_file}")
    lines.append("changes: " + ("; ".join(r.changes) if r.changes else "none for this role"))
    lines += _ident_lines("current  ", r.current) + _ident_lines("candidate", r.candidate)
    lines.append("capability losses:" + (" none" if not r.capability_losses else ""))
    for loss in r.capability_losses:
        lines.append(f"  - {loss.capability} ({loss.uses}){' [blocking]' if loss.blocking else ''}: {loss.effect}")
    lines.append("pricing:")
    lines.append("  " + _price_line("current  ", r.pricing_current))
    lines.append("  " + _price_line("candidate", r.pricing_candidate))
    lines.append("consequences:")
    for c in r.consequences:
        lines.append(f"  - {c.summary}")
        if c.chunks is not None:
            eta = f"~{c.estimated_seconds:.0f} s" if c.estimated_seconds is not None else "time unknown"
            if c.kind == "reindex":
                lines.append(f"    {c.chunks} chunks, {eta} ({c.rate_source})")
            else:
                lines.append(f"    {c.chunks} chunks ({c.rate_source})")
        if c.estimated_input_tokens is not None or c.cost_note:
            toks = ""
            if c.estimated_input_tokens is not None:
                toks = f"~{c.estimated_input_tokens} input tokens"
                if c.estimated_output_tokens is not None:
                    toks += f" + ~{c.estimated_output_tokens} output tokens"
                toks += "; "
            cost = f"~{c.estimated_cost_usd} USD ({c.cost_note})" if c.estimated_cost_usd is not None else c.cost_note
            lines.append(f"    {toks}{cost}")
        for cmd in c.commands:
            lines.append(f"    $ {cmd}")
    rb = r.rollback
    lines.append(f"rollback: current config hash {rb.config_hash}" + (f" ({rb.config_file})" if rb.config_file else ""))
    lines.append(f"  restore: {rb.restore}")
    if rb.command:
        lines.append(f"  $ {rb.command}")
    for n in rb.notes:
        lines.append(f"  note: {n}")
    if r.quality_per_dollar:
        from rag_engine.ops.quality_render import ROW_HEADERS, row_cells

        lines.append("quality per dollar (current, then candidate):")
        lines.append("  " + " | ".join(ROW_HEADERS))
        lines += ["  " + " | ".join(row_cells(q)) for q in r.quality_per_dollar]
        lines += [f"  note: {q.model}: {n}" for q in r.quality_per_dollar for n in q.notes]
    if r.reasons:
        lines.append("blocked because:")
        lines += [f"  - {x}" for x in r.reasons]
    if r.notes:
        lines.append("notes:")
        lines += [f"  - {x}" for x in r.notes]
    return "\n".join(lines)
