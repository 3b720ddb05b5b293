"""Quality per dollar by generation model: what each model's answers are worth for what they cost.

    by_model(cfg, root, ledger_url) -> CostTable        (``rag costs --by-model``, usage_costs)

Quality is what the answers are worth, paired with what wrote them: from eval reports
(``costs.report_dirs`` and ``evals.reports_dir``), per answerer (the generation model for the
questions it answered, the engine's extractive answer for the ones answered without a model) the
newest report it answered in, and there the share of its answers to questions with a known fact
that state the fact (``evals.answer_metrics``: "fact stated"). A retrieval figure (nDCG) is not
quality per dollar: no generation model changes it. Cost comes from the usage
ledger: the model's measured tokens per answer call (purpose ``answer``; one call per generated
answer) priced with the *current* pricing file, or, for a model on our own machine (its provider's
``local_cost``), the current machine-time rate: per token at a derived rate, or the measured
seconds per answer call; plus the shared query-side calls (query embedding, expansion, rerank) at
their recorded mean cost per call. Then

    quality per dollar = fact-stated rate / cost per query   (facts stated one dollar buys per query)
    cost per hour      = cost per query x costs.query_rate_per_hour

A model without a price is "unknown", never free; a cost priced from estimated token counts (no
provider reported them: a replay fixture's characters / 4) is marked estimated. A model with no
answer calls in the ledger takes its tokens per query from the default generation model's answers
to the same prompts (the swap dry run: from the current model's), marked as a projection, and
priced at its own rate; a model priced by the second cannot be projected (its speed is unknown)
and stays unknown, said so.
Extraction and indexing spend are one-off costs of building the graph and the index: they are
listed apart and never folded into the per-query cost.

The eval reports' side is ``rag_engine.ops.eval_quality``; the table as shown is
``rag_engine.ops.quality_render``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from rag_engine.config import EngineConfig, LocalCostConfig
from rag_engine.errors import ConfigError
from rag_engine.ops.eval_quality import EXTRACTIVE, ReportSummary, latest_reports
from rag_engine.providers.ledger import UsageLedger
from rag_engine.providers.pricing import PriceTable, local_cost_for, price_key, pricing_for

log = logging.getLogger(__name__)

ANSWER_PURPOSE = "answer"
SHARED_QUERY_PURPOSES = ("query", "query_expansion", "rerank")
"""Per-query calls every generation model shares: the query embedding and local inference."""
SPEND_KIND: dict[str, Literal["extraction", "index"]] = {"graph_extraction": "extraction", "index": "index"}


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelRow(_Frozen):
    """One answerer (a generation model, or the extractive answer): its answers' quality, its measured
    tokens and its cost per query."""

    model: str
    """The configured model name, else ``provider/served_model`` (a report of an unconfigured model)."""
    provider: str
    served_model: str
    default: bool
    """The configured defaults.generation_model."""
    report: str | None = None
    report_created_at: datetime | None = None
    golden_hash: str | None = None
    answered_as: tuple[str, ...] = ()
    """The models the provider said wrote the answers (a fixture's label for a replay cassette)."""
    answers: int | None = None
    """Questions of the report this answerer answered."""
    fact_questions: int | None = None
    """Of those, the questions with a fact the answer must state."""
    fact_stated_rate: float | None = None
    """The share of ``fact_questions`` whose answer states the fact: the quality of the answers."""
    answer_calls: int = 0
    tokens_projected_from: str | None = None
    """Without answer calls of its own: the model whose answer calls on the same prompts gave the
    tokens per query (a projection: the answers' length may differ), priced at this model's rate."""
    tokens_estimated: bool = False
    """The answer calls' token counts were estimated (no provider reported them), so the cost is an estimate."""
    input_tokens_per_query: float | None = None
    output_tokens_per_query: float | None = None
    price_key: str | None = None
    priced_by: str | None = None
    """How the answer calls are priced: the pricing file's entry, or the provider's machine-time rate."""
    generation_cost_per_query: Decimal | None = None
    shared_cost_per_query: Decimal | None = None
    cost_per_query: Decimal | None = None
    quality_per_dollar: float | None = None
    cost_per_hour: Decimal | None = None
    notes: tuple[str, ...] = ()
    """Plain words for every unknown: no price, no measured tokens, no eval report."""


class SpendRow(_Frozen):
    """Recorded spend of one purpose and model (costs as recorded, unknown ones counted apart)."""

    kind: Literal["query", "extraction", "index", "other"]
    purpose: str
    provider: str
    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost: Decimal | None
    """Sum of the known costs; None when no call has a known cost."""
    unknown_cost_calls: int
    estimated_calls: int = 0
    """Calls whose token counts (so their cost) were estimated, not reported by the provider."""


class CostTable(_Frozen):
    currency: str
    pricing_version: str | None
    query_rate_per_hour: float
    rows: tuple[ModelRow, ...]
    spend: tuple[SpendRow, ...]
    """Recorded spend by purpose and model; extraction and index spend are never per-query cost."""
    spend_totals: dict[str, Decimal | None]
    """kind -> known total (None: nothing known)."""
    notes: tuple[str, ...] = ()


# -- inputs ------------------------------------------------------------------------------------


@dataclass
class _Usage:
    calls: int = 0
    errors: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal | None = None
    unknown_cost_calls: int = 0
    estimated_calls: int = 0
    ok_cost: Decimal = field(default_factory=Decimal)
    ok_latency_ms: int = 0
    """Measured milliseconds of the ok calls: machine time, for a model priced by the second."""


def ledger_usage(ledger: UsageLedger) -> dict[tuple[str, str, str], _Usage]:
    """(purpose, provider, requested model) -> measured tokens and recorded cost, streamed."""
    out: dict[tuple[str, str, str], _Usage] = {}
    columns = ("purpose", "provider", "requested_model", "status", "input_tokens", "cached_input_tokens")
    for purpose, provider, model, status, n_in, n_cached, n_out, cost, latency_ms, estimated in ledger.stream(
        *columns, "output_tokens", "cost", "latency_ms", "estimated"
    ):
        u = out.setdefault((purpose, provider, model), _Usage())
        u.calls += 1
        u.errors += status != "ok"
        u.input_tokens += n_in
        u.cached_input_tokens += n_cached or 0
        u.output_tokens += n_out
        u.ok_latency_ms += latency_ms if status == "ok" else 0
        u.estimated_calls += bool(estimated)
        if cost is None:
            u.unknown_cost_calls += 1
        else:
            u.cost = (u.cost or Decimal(0)) + cost
            if status == "ok":
                u.ok_cost += cost
    return out


# -- the table ---------------------------------------------------------------------------------


def _shared_cost(cfg: EngineConfig, usage: dict[tuple[str, str, str], _Usage]) -> tuple[Decimal | None, list[str]]:
    """Mean recorded cost per call of each shared query-side purpose of the configured models."""
    notes: list[str] = []
    models = {cfg.defaults.embedding_model, cfg.defaults.local_inference_model} - {None}
    served = {(m.provider, m.served_model) for m in cfg.models if m.name in models}
    total = Decimal(0)
    for purpose in SHARED_QUERY_PURPOSES:
        rows = [u for (p, prov, mod), u in usage.items() if p == purpose and (prov, mod) in served]
        ok = sum(u.calls - u.errors for u in rows)
        if not ok:
            continue
        if any(u.unknown_cost_calls for u in rows):
            notes.append(f"shared per-query cost unknown: {purpose} calls without a known cost in the ledger")
            return None, notes
        total += sum((u.ok_cost for u in rows), Decimal(0)) / ok
    return total, notes


def model_row(
    *,
    name: str,
    provider: str,
    served_model: str,
    pricing_ref: str | None,
    default: bool,
    cfg: EngineConfig,
    prices: PriceTable | None,
    report: ReportSummary | None,
    usage: dict[tuple[str, str, str], _Usage],
    shared: Decimal | None,
    local: LocalCostConfig | None = None,
    proxy: tuple[str, str, str] | None = None,
) -> ModelRow:
    """``local``: the machine-time rate of the model's provider (it replaces the pricing file's).
    ``proxy``: (name, provider, served model) of a model whose answer calls give the tokens per
    query when this one has none (the same prompts); never for a model priced by the second."""
    notes: list[str] = []
    extractive = (provider, served_model) == EXTRACTIVE
    key = None if extractive else price_key(pricing_ref, provider, served_model)
    u = usage.get((ANSWER_PURPOSE, provider, served_model))
    ok_calls = (u.calls - u.errors) if u else 0
    projected_from = None
    if not ok_calls and proxy is not None and (local is None or local.basis == "tokens"):
        p = usage.get((ANSWER_PURPOSE, proxy[1], proxy[2]))
        if p is not None and p.calls > p.errors:
            u, projected_from = p, proxy[0]
            notes.append(
                f"no answer calls of its own: tokens per query projected from {proxy[0]}'s {p.calls - p.errors} "
                "answer calls on the same prompts (its answers' length may differ)"
            )
    measured = (u.calls - u.errors) if u else 0
    gen_cost: Decimal | None
    tokens_in = tokens_out = None
    priced = local is not None or (prices is not None and key is not None and key in prices.models)
    priced_by = None
    if extractive:
        priced_by = "no model call"
    elif local is not None:
        priced_by = local.label
        notes.append(f"priced by {local.describe()}")
    elif priced and prices is not None:
        priced_by = f"pricing file {key}"
    if not extractive and not priced:
        notes.append(f"cost unknown: no price for {key} in {cfg.pricing_file}")
    if extractive:
        gen_cost = Decimal(0)
    elif not measured or u is None:
        gen_cost = None
        notes.append(
            f"no answer calls of {provider}/{served_model} in the ledger: tokens per query not measured "
            "(run the eval with --generate)"
        )
    else:
        tokens_in, tokens_out = u.input_tokens / measured, u.output_tokens / measured
        total: Decimal | None
        if local is not None:  # machine time: the tokens at the derived rate, or the measured seconds
            total = local.cost(latency_ms=u.ok_latency_ms, tokens=u.input_tokens + u.output_tokens)
            if local.basis == "seconds":
                notes.append(f"machine time: {u.ok_latency_ms / measured / 1000:.2f} s per answer call, measured")
        else:
            total = (
                None if prices is None else prices.price(key, u.input_tokens, u.cached_input_tokens, u.output_tokens)
            )
        gen_cost = None if total is None else _plain(total / measured)
    estimated = bool(measured and u is not None and u.estimated_calls)
    if estimated and u is not None:
        notes.append(
            f"cost estimated: {u.estimated_calls} of its answer calls' token counts were computed, not reported "
            "by a provider (a replay fixture's characters / 4)"
        )
    if report is None:
        notes.append(f"no eval report with answers by {provider}/{served_model}: quality unknown")
    elif report.fact_stated_rate is None:
        notes.append(
            f"none of its {report.answers} answers in {report.path} is to a question with a fact to state: "
            "quality unknown"
        )
    cost = None if gen_cost is None or shared is None else _plain(gen_cost + shared)
    qpd = None
    quality = report.fact_stated_rate if report else None
    if cost is not None and quality is not None:
        if cost > 0:
            qpd = round(quality / float(cost), 2)
        else:
            notes.append("no spend per query: quality per dollar is unbounded (free)")
    return ModelRow(
        model=name,
        provider=provider,
        served_model=served_model,
        default=default,
        report=report.path if report else None,
        report_created_at=report.created_at if report else None,
        golden_hash=report.golden_hash if report else None,
        answered_as=report.answered_as if report else (),
        answers=report.answers if report else None,
        fact_questions=report.fact_questions if report else None,
        fact_stated_rate=quality,
        answer_calls=ok_calls,
        tokens_projected_from=projected_from,
        tokens_estimated=estimated,
        input_tokens_per_query=None if tokens_in is None else round(tokens_in, 1),
        output_tokens_per_query=None if tokens_out is None else round(tokens_out, 1),
        price_key=key,
        priced_by=priced_by,
        generation_cost_per_query=gen_cost,
        shared_cost_per_query=shared,
        cost_per_query=cost,
        quality_per_dollar=qpd,
        cost_per_hour=None if cost is None else _plain(cost * _rate(cfg.costs.query_rate_per_hour)),
        notes=tuple(notes),
    )


def _rate(per_hour: float) -> Decimal:
    return Decimal(repr(per_hour))


def _plain(value: Decimal) -> Decimal:
    """Without trailing zeros and never in exponent notation (0.0422500 -> 0.04225, 1E+2 -> 100)."""
    value = value.normalize()
    return value.quantize(Decimal(1)) if value.as_tuple().exponent > 0 else value  # type: ignore[operator]


def _spend(usage: dict[tuple[str, str, str], _Usage]) -> list[SpendRow]:
    rows = []
    for (purpose, provider, model), u in sorted(usage.items()):
        kind: Literal["query", "extraction", "index", "other"]
        if purpose == ANSWER_PURPOSE or purpose in SHARED_QUERY_PURPOSES:
            kind = "query"
        else:
            kind = SPEND_KIND.get(purpose, "other")
        rows.append(
            SpendRow(
                kind=kind,
                purpose=purpose,
                provider=provider,
                model=model,
                calls=u.calls,
                input_tokens=u.input_tokens,
                output_tokens=u.output_tokens,
                cost=u.cost,
                unknown_cost_calls=u.unknown_cost_calls,
                estimated_calls=u.estimated_calls,
            )
        )
    return rows


def _prices(cfg: EngineConfig, root: str | Path) -> PriceTable | None:
    try:
        return pricing_for(cfg, root)
    except ConfigError as exc:
        log.warning("no pricing: %s", exc)
        return None


def rows_for(
    cfg: EngineConfig,
    root: str | Path,
    models: Iterable[str],
    usage: dict[tuple[str, str, str], _Usage],
    reports: dict[tuple[str, str], ReportSummary],
    proxy: tuple[str, str, str] | None = None,
) -> list[ModelRow]:
    """Rows for configured generation models of ``cfg`` (by name), priced with ``cfg``'s pricing; a
    model without answer calls takes its tokens per query from ``proxy`` (name, provider, served
    model; default: ``cfg``'s default generation model)."""
    prices = _prices(cfg, root)
    if proxy is None:
        d = cfg.model(cfg.defaults.generation_model)
        proxy = (d.name, d.provider, d.served_model) if d is not None else None
    shared, _ = _shared_cost(cfg, usage)
    out = []
    for name in models:
        m = cfg.model(name)
        if m is None:
            raise ConfigError(f"{name!r} is not a configured model")
        provider = cfg.provider(m.provider)
        out.append(
            model_row(
                name=m.name,
                provider=m.provider,
                served_model=m.served_model,
                pricing_ref=m.pricing_ref,
                default=m.name == cfg.defaults.generation_model,
                cfg=cfg,
                prices=prices,
                report=reports.get((m.provider, m.served_model)),
                usage=usage,
                shared=shared,
                local=None if provider is None else local_cost_for(provider, m),
                proxy=proxy if proxy is not None and proxy[0] != m.name else None,
            )
        )
    return out


def by_model(cfg: EngineConfig, root: str | Path, ledger_url: str) -> CostTable:
    """Every configured generation model, and every model an eval report was answered by."""
    ledger = UsageLedger(ledger_url)
    try:
        usage = ledger_usage(ledger)
    finally:
        ledger.dispose()
    reports = latest_reports(cfg, root)
    prices = _prices(cfg, root)
    shared, notes = _shared_cost(cfg, usage)
    rows = rows_for(cfg, root, [m.name for m in cfg.models if m.role == "generation"], usage, reports)
    configured = {(r.provider, r.served_model) for r in rows}
    for (provider, model), rep in sorted(reports.items()):
        if (provider, model) in configured:
            continue
        rows.append(
            model_row(
                name="extractive (no model)" if (provider, model) == EXTRACTIVE else f"{provider}/{model}",
                provider=provider,
                served_model=model,
                pricing_ref=None,
                default=False,
                cfg=cfg,
                prices=prices,
                report=rep,
                usage=usage,
                shared=shared,
            )
        )
    hashes = {r.golden_hash for r in rows if r.golden_hash}
    if len(hashes) > 1:
        notes.append("the reports were scored on different golden sets: compare quality with care")
    spend = _spend(usage)
    totals: dict[str, Decimal | None] = {}
    for kind in [k for k in ("query", "extraction", "index", "other") if any(s.kind == k for s in spend)]:
        known = [s.cost for s in spend if s.kind == kind and s.cost is not None]
        totals[kind] = sum(known, Decimal(0)) if known else None
    return CostTable(
        currency=prices.currency if prices else "USD",
        pricing_version=prices.version if prices else None,
        query_rate_per_hour=cfg.costs.query_rate_per_hour,
        rows=tuple(rows),
        spend=tuple(spend),
        spend_totals=totals,
        notes=tuple(notes),
    )
