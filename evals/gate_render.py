"""The eval gate's human summary: status, one line per gated metric, floor and resource check,
the audit line, the reasons.

Printed by ``python -m evals.gates`` and by ``rag_assets.ci_gate``. Imports ``evals.gate_models``
only, of the gate's modules (see its docstring for the layout).
"""

from __future__ import annotations

from evals.gate_models import GateResult


def summary(result: GateResult) -> str:
    """A few human lines: status, one line per gated metric, one per pack and per pack's split
    (the mean delta of each gated metric; ``!`` marks a judged pack's regression), the floor,
    resources, audit and the reasons."""
    lines = [f"eval gate: {result.status.upper()} (exit {result.exit_code})"]
    for name, g in result.metrics.items():
        flag = "  REGRESSED" if g.regressed else ""
        lines.append(
            f"  {name:<32} baseline {g.baseline_mean:.4f}  candidate {g.candidate_mean:.4f}  "
            f"delta {g.mean_delta:+.4f}  CI [{g.ci_low:+.4f}, {g.ci_high:+.4f}]  n={g.n}{flag}"
        )
    for name, group in result.groups.items():
        kind = "pack" if group.judged else "split"
        cells = "  ".join(
            f"{metric} {g.mean_delta:+.4f}{'!' if g.regressed else ''}" for metric, g in group.metrics.items()
        )
        lines.append(f"  {kind} {name:<30} n={group.n:<4} delta {cells}")
    for pack, per in result.floor.items():
        for metric, c in per.items():
            flag = "  BELOW BM25" if c.failed else ""
            lines.append(
                f"  floor {pack + ' ' + metric:<26} bm25 {c.bm25:.4f}  engine {c.engine:.4f}  "
                f"delta {c.delta:+.4f}  margin {c.margin}{flag}"
            )

    def fmt(v: float | None) -> str:
        return "unknown" if v is None else f"{v:.6g}"

    for name, r in result.resources.items():
        flag = "  REGRESSED" if r.regressed else ("" if r.judged else "  (not judged)")
        est = "  (estimated)" if r.estimated else ""  # from token counts no provider reported
        lines.append(
            f"  {name:<32} baseline {fmt(r.baseline)}  candidate {fmt(r.candidate)}  "
            f"tolerance +{r.tolerance:.0%}{est}{flag}"
        )
    notes = dict.fromkeys(r.note for r in result.resources.values() if r.estimated and r.note)
    lines += [f"  {n}" for n in notes]
    if result.audit is not None:
        a = result.audit
        gen = f"{a.generation['provider']}/{a.generation['model']}" if a.generation else "-"
        emb = f"{a.embedder['provider']}/{a.embedder['model']} ({a.embedder['dimension']})" if a.embedder else "-"
        lines.append(
            f"  audit: generation {gen}; embedder {emb}; config {a.config_hash}; golden "
            f"{(a.golden_hash or '-')[:12]} ({', '.join(a.golden_paths)}); reports baseline "
            f"{(result.baseline_sha256 or '-')[:12]} candidate {(result.candidate_sha256 or '-')[:12]}"
        )
        if a.generation_change:
            lines.append(f"  generation changed: {a.generation_change}")
    lines += [f"  - {r}" for r in result.reasons]
    if result.acceptance is not None and not result.acceptance.applied and result.status == "pass":
        lines += [f"  acceptance: {p}" for p in result.acceptance.problems]
    return "\n".join(lines)
