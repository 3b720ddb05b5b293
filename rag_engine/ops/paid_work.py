"""Paid extraction through `rag ingest`: the same approval as Dagster's before any model call.

Dagster holds an extraction run above ``automation.max_auto_cost_usd`` (or of unknown cost) until
an operator approves it (``paid_automation``, bound to the asset, its partitions and the estimate);
`rag ingest` asks for the same approval by the same rule (``governance.approvals``): the estimate
is shown with ``rag ingest --estimate`` (nothing runs), and the run proceeds only with
``--approved-by``, ``--reason`` and that ``--inputs-hash`` (with principals configured, the
operator's key). A free extraction model (a local one without a price: replay, llama.cpp) needs none.

The estimate: one call per chunk of the pack's documents whose answer the extraction cache does
not hold (the chunks a run would send), tokens by the shared estimator
(``ops.estimates.extraction_tokens``), priced at the model's rate.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from rag_engine.engine import Engine
from rag_engine.governance.approvals import PAID_AUTOMATION, Approval, require
from rag_engine.ingest.documents import discover, load_document
from rag_engine.ingest.extraction_step import uncached_chunks
from rag_engine.ops.estimates import extraction_tokens
from rag_engine.packs import ChunkRecord, DomainPack

COMMAND = "rag ingest"


def _free(engine: Engine, model_name: str) -> bool:
    spec = engine.registry.spec(model_name)
    return not spec.provider.hosted and spec.model.pricing_ref is None


def _chunks(engine: Engine, pack: DomainPack) -> list[ChunkRecord]:
    out: list[ChunkRecord] = []
    for ref in discover(pack):
        try:
            out += pack.chunk(load_document(pack, ref.partition_key, max_bytes=engine.cfg.max_document_bytes))
        except Exception:  # noqa: BLE001 - an estimate: a document that does not load counts no calls
            continue
    return out


def extraction_estimate(engine: Engine, pack: DomainPack) -> dict[str, Any]:
    """What extracting the pack's documents would cost now (calls, tokens, USD or None = unknown)."""
    name = engine.cfg.defaults.extraction_model or engine.cfg.defaults.generation_model
    if not pack.entry.extraction or _free(engine, name):
        return {"model": name, "calls": 0, "cost_usd": 0.0, "tokens_from": "free or no extraction"}
    todo = uncached_chunks(engine, pack, _chunks(engine, pack))
    tokens = extraction_tokens(engine, [pack.name], len(todo), sum(len(c.text) for c in todo))
    cost: Decimal | None = Decimal(0)
    if tokens.calls:
        spec = engine.registry.spec(name)
        cost = engine.pricing.price(spec.model.pricing_ref, tokens.input_tokens, 0, tokens.output_tokens)
    return {
        "model": name,
        "calls": tokens.calls,
        "input_tokens": tokens.input_tokens,
        "output_tokens": tokens.output_tokens,
        "tokens_from": tokens.source,
        "cost_usd": None if cost is None else float(cost),
    }


def within_limit(engine: Engine, estimate: dict[str, Any]) -> bool:
    cost = estimate["cost_usd"]
    return cost is not None and cost <= engine.cfg.automation.max_auto_cost_usd


def ingest_inputs(engine: Engine, packs: list[DomainPack]) -> dict[str, Any]:
    """What an approval of `rag ingest`'s paid extraction binds: per pack above the limit, its estimate."""
    estimates = {p.name: extraction_estimate(engine, p) for p in packs}
    above = {name: e for name, e in estimates.items() if not within_limit(engine, e)}
    return {"command": COMMAND, "limit_usd": engine.cfg.automation.max_auto_cost_usd, "paid": above}


def require_ingest_approval(
    engine: Engine, inputs: dict[str, Any], approval: Approval | None, *, audit: Any, actor: str | None
) -> None:
    """Nothing to approve when no pack's extraction is above the limit; else ``require`` (recorded)."""
    if not inputs["paid"]:
        return
    require(
        approval,
        PAID_AUTOMATION,
        inputs,
        audit=audit,
        actor=actor,
        unchanged="nothing was ingested: see the estimate with `rag ingest --estimate`",
    )
