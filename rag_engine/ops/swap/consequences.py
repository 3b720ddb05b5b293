"""What the swap would cost: each model's price, and the re-index, re-extraction or eval it calls for.

``pricing`` reads the pricing table once per config and hands it back beside the report's
``Pricing``, because the consequences price their work with that same table: a full re-index when
the embedder changes (time from a measured or ledger rate), a re-extraction of the extracting
packs' chunks when the extraction model changes, and an eval through the gate when the generation
model changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

from rag_engine.config import EngineConfig, under_root
from rag_engine.errors import ConfigError, RagError
from rag_engine.ops.swap.probes import active_chunks, ledger_embed_rate, measure_embed_rate
from rag_engine.ops.swap.report import Consequence, Identity, Pricing
from rag_engine.text.token_count import ESTIMATE, count_tokens, estimated_tokens

# -- pricing ------------------------------------------------------------------------------------


def pricing(cfg: EngineConfig, ident: Identity, root: Path) -> tuple[Pricing, Any]:
    from rag_engine.providers.pricing import ModelPrice, load_pricing, local_compute, local_cost_for, price_key

    if ident.model is None:
        return Pricing(price_key=None, pricing_version=None, known=False, gap="role off: no model, no cost"), None
    model = cfg.model(ident.model)
    if model is None:
        raise ConfigError(f"unknown model {ident.model!r}; configured: {[m.name for m in cfg.models]}")
    # the identity's provider and served model are this model's (see probes.identity)
    key = price_key(model.pricing_ref, model.provider, model.served_model)
    try:
        table = load_pricing(under_root(root, cfg.pricing_file))
    except ConfigError as exc:
        return Pricing(
            price_key=key, pricing_version=None, known=False, gap=f"cost unknown: pricing file unreadable ({exc})"
        ), None
    provider = cfg.provider(model.provider)
    local = local_cost_for(provider, model) if provider is not None else None
    if local is not None:
        rate = local.per_million_tokens
        if rate is None:  # priced by the second: no per-token price to estimate work with
            return Pricing(
                price_key=key,
                pricing_version=local.version,
                known=True,
                basis=local.describe(),
                gap="per-token estimates unknown: priced by each call's measured seconds",
            ), None
        per_token = ModelPrice(input_per_million=rate, cached_input_per_million=rate, output_per_million=rate)
        table = table.model_copy(update={"version": local.version, "models": {**table.models, key: per_token}})
    elif provider is not None and local_compute(provider, model):
        free = ModelPrice(input_per_million=Decimal(0), output_per_million=Decimal(0))
        table = table.model_copy(update={"models": {**table.models, key: free}})
    price = table.models.get(key)
    if price is None:
        why = (
            f"no pricing_ref, and no entry {key!r} in {cfg.pricing_file}"
            if model.pricing_ref is None
            else f"pricing_ref {key!r} has no entry in {cfg.pricing_file}"
        )
        return Pricing(
            price_key=key,
            pricing_version=table.version,
            known=False,
            gap=f"cost unknown: {why} (version {table.version})",
        ), table

    def fmt(v: Decimal | None) -> str | None:
        if v is not None and local is not None:  # a derived rate: shown to a millionth of a dollar
            v = v.quantize(Decimal("1e-6")).normalize()
        return None if v is None else format(v, "f")

    return Pricing(
        price_key=key,
        pricing_version=table.version,
        known=True,
        basis=local.describe() if local is not None else f"pricing file {key}",
        input_per_million=fmt(price.input_per_million),
        cached_input_per_million=fmt(price.cached_input_per_million),
        output_per_million=fmt(price.output_per_million),
    ), table


def _cost(table: Any, key: str | None, input_tokens: int, output_tokens: int) -> str | None:
    if table is None or key is None:
        return None
    cost = table.price(key, input_tokens, None, output_tokens)
    return None if cost is None else format(cost.quantize(cost.__class__("0.000001")), "f")


# -- consequences ---------------------------------------------------------------------------------


def embedding_consequence(
    engine: Any,
    cand_cfg: EngineConfig,
    current: Identity,
    candidate: Identity,
    env: Mapping[str, str],
    table: Any,
    price_key_: str | None,
    notes: list[str],
    can_call: bool,
) -> Consequence:
    n, chars, sample = active_chunks(engine)
    counted = count_tokens(sample, candidate.served_model) if sample else None
    if counted is not None and not counted.estimated:  # the candidate's own tokenizer, on the sample
        avg_tokens = counted.tokens / len(sample)
        count_how = f"{counted.method}, {len(sample)} sampled chunks"
    else:
        avg_tokens = estimated_tokens(chars) / n if n else 0.0
        count_how = ESTIMATE
    rate, per_text, how = None, None, ""
    if can_call:
        try:
            rate, per_text, how = measure_embed_rate(engine, cand_cfg, candidate, env, sample)
        except RagError as exc:
            notes.append(f"sample embedding through the candidate failed: {type(exc).__name__}")
    if rate is None:
        rate, how = ledger_embed_rate(engine, candidate, avg_tokens or 1.0)
    tokens = round(per_text * n) if per_text else round(avg_tokens * n)
    token_how = "reported by the sample" if per_text else count_how
    cost = _cost(table, price_key_, tokens, 0)
    cost_note = (
        f"{tokens} input tokens ({token_how}) at the candidate's rate"
        if cost is not None
        else f"cost unknown: the candidate has no price ({tokens} input tokens, {token_how})"
    )
    dim = ""
    if current.dimension != candidate.dimension:
        dim = f"; dimension {current.dimension} -> {candidate.dimension} (a new vector index)"
    seconds = round(n / rate, 1) if rate else None
    return Consequence(
        kind="reindex",
        summary=(
            f"embedder identity changes ({current.identity} -> {candidate.identity}){dim}: full blue/green "
            f"re-index of {n} active chunks before the candidate can serve queries; the eval gate refuses "
            "an embedder change without a complete re-index"
        ),
        chunks=n,
        estimated_seconds=seconds,
        rate_source=how,
        estimated_input_tokens=tokens,
        estimated_cost_usd=cost,
        cost_note=cost_note,
        commands=("RAG_CONFIG=<candidate config> rag reindex --keep-old", "make eval-gate"),
    )


def extraction_consequence(
    engine: Any, cand_cfg: EngineConfig, current: Identity, candidate: Identity, table: Any, price_key_: str | None
) -> Consequence:
    from rag_engine.ops.estimates import extraction_tokens

    packs = [p.name for p in cand_cfg.enabled_packs if p.extraction]
    n, chars, _ = active_chunks(engine, packs) if packs else (0, 0, [])
    tokens = extraction_tokens(engine, packs, n, chars)
    how = tokens.source
    est_in: int | None = tokens.input_tokens if n else None
    est_out: int | None = tokens.output_tokens if n else None
    if n:
        cost = _cost(table, price_key_, tokens.input_tokens, tokens.output_tokens)
        cost_note = "at the candidate's rate" if cost is not None else "cost unknown: the candidate has no price"
    else:
        cost = None
        cost_note = "no active chunk of an extracting pack: nothing to re-extract"
    return Consequence(
        kind="reextract",
        summary=(
            f"extraction model identity changes ({current.identity} -> {candidate.identity}): the extraction "
            f"cache is keyed by it, so {n} active chunks of {', '.join(packs) or 'no pack'} are re-extracted, "
            "then graph_writes and an eval"
        ),
        chunks=n,
        rate_source=how,
        estimated_input_tokens=est_in,
        estimated_output_tokens=est_out,
        estimated_cost_usd=cost,
        cost_note=cost_note,
        commands=("RAG_CONFIG=<candidate config> rag ingest", "make eval-gate"),
    )


def generation_consequence(current: Identity, candidate: Identity) -> Consequence:
    return Consequence(
        kind="eval_required",
        summary=(
            f"generation model changes ({current.identity} -> {candidate.identity}): an eval answered by the "
            "candidate must pass the gate before it becomes the default (gate rule "
            "generation_changed_without_eval fails an extractive or stale report)"
        ),
        commands=(
            "RAG_CONFIG=<candidate config> python -m evals.runner --config <candidate config> --generate "
            "--output var/eval/candidate.json",
            "python -m evals.gates --config <candidate config> --report var/eval/candidate.json "
            "--baseline-report evals/reports/BASELINE.json --output var/eval/gate.json",
        ),
    )
