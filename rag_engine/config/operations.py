"""Budgets (extraction runs, the answer's context), the eval gate, automation, the audit trail
and the cost report."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from rag_engine.config.base import Frozen, under_root


class FirstRunBudgetConfig(Frozen):
    """The budget of a pack's first paid extraction run (no (:ExtractionRun) of the pack yet): small,
    so a new pack's first run shows what extraction costs before it spends more."""

    max_chunks_per_run: int = Field(10, ge=1)
    max_tokens_per_run: int = Field(4000, ge=1)
    batch_size: int = Field(2, ge=1)


class BudgetsConfig(Frozen):
    first_run: FirstRunBudgetConfig | None = FirstRunBudgetConfig()
    """A new pack's first extraction run with a paid model (hosted, or priced by the pricing file)
    gets this budget (each figure at most the one below); null gives it the one below. A free local model
    (replay, llama.cpp without a price) runs on the budget below from the start."""
    max_chunks_per_run: int = Field(500, ge=1)
    max_tokens_per_run: int = Field(500_000, ge=1)
    batch_size: int = Field(8, ge=1)
    max_output_tokens: int = Field(2048, ge=16)
    """Sent as max_tokens with every extraction call. A call starts only if its worst case
    (estimated prompt tokens + this) fits what is left of max_tokens_per_run."""


class ContextBudgetsConfig(Frozen):
    system: int = Field(512, ge=0)
    documents: int = Field(3000, ge=0)
    conversation: int = Field(1000, ge=0)
    """Tokens of the caller's earlier turns (``conversation`` of the query routes, `rag query
    --history`) the answer model sees; the most recent turns that fit are kept, the rest are listed
    in the context's overflow."""
    tools: int = Field(500, ge=0)
    """Tokens of tool specs, for callers of ``assemble_context`` that build their own tool-using
    prompt; the query path calls no tools, so it leaves this category empty."""
    max_turns: int = Field(50, ge=0, le=1000)
    """A query's conversation may hold at most this many turns (more is a clear input error, not a
    silent cut: the budget above decides what the model sees)."""
    max_turn_chars: int = Field(8000, ge=1)
    """... each of at most this many characters."""
    answer: int | None = Field(None, ge=16)
    """Sent as max_tokens with every answer call (None: none sent, the server's own limit). A small
    local model may otherwise write until its context is full; an answer cut here fails the schema
    and the query answers extractively."""


class EvalsConfig(Frozen):
    """Eval gate policy: which metrics gate, how much drop is tolerated, how sure we must be."""

    gate_metrics: tuple[str, ...] = (
        "ndcg@10",
        "map@10",
        "recall@5",
        "mrr@10",
        "citation_hit_rate",
        "insufficient_evidence_accuracy",
    )
    max_drop: float = Field(0.02, ge=0, le=1)
    bootstrap_samples: int = Field(2000, ge=100, le=100_000)
    confidence: float = Field(0.95, gt=0.5, lt=1)
    seed: int = 7
    min_queries: int = Field(20, ge=1)
    pack_min_queries: int = Field(10, ge=2)
    """A pack's own paired rows are judged (a regression of one pack fails the gate even when the
    pooled mean holds) when the pack has at least this many paired values of the metric; a smaller
    pack's rows are shown and not judged. Same rule as the pooled rows: mean delta below
    -max_drop and the bootstrap interval wholly below 0."""
    bm25_margin: float | None = Field(0.0, ge=0, le=1)
    """The BM25 floor: on every pack the engine's nDCG@10 and MAP@10 may trail BM25's (same run,
    same chunks) by at most this much, or the gate fails. None turns the floor off."""
    golden: tuple[str, ...] = ()
    """Golden query files (relative to the project root) the eval report runs."""
    gate_dirs: tuple[str, ...] = ("var/eval",)
    """Where ``gate.json`` results are read besides ``reports_dir`` (``make eval-gate`` writes
    ``var/eval``): the status view shows the newest; a re-index cut-over accepts a passed one."""

    def gate_files(self, root: Path) -> tuple[Path, ...]:
        """Every ``gate.json`` location, each once (``reports_dir`` and ``gate_dirs``)."""
        dirs = dict.fromkeys(under_root(root, d) for d in (self.reports_dir, *self.gate_dirs))
        return tuple(d / "gate.json" for d in dirs)

    cost_tolerance: float = Field(0.10, ge=0)
    """Gate metric ``cost_per_query``: the candidate's mean cost per query may exceed the
    baseline's by this share (0.10: 10 %); unknown cost against a known one fails."""
    tokens_tolerance: float = Field(0.10, ge=0)
    """Gate metric ``tokens_per_query``: allowed share of increase of mean model tokens per query."""
    latency_ratio_tolerance: float = Field(0.50, ge=0)
    """Gate metric ``latency_ratio``: p50 engine latency / p50 of the in-run control (the fulltext
    leg alone on the same questions) may grow by this share; a slower machine slows both."""
    baseline: str = "evals/reports/BASELINE.json"
    reports_dir: str = "var/reports"
    acceptances_dir: str = "evals/acceptances"


class AutomationConfig(Frozen):
    """Declarative automation in Dagster: free work (graph rebuilds, re-indexing on a local
    embedder) always runs by itself; work that calls a priced model runs by itself only when
    its estimated cost is at most this, otherwise it waits for an operator's approval."""

    max_auto_cost_usd: float = Field(0.0, ge=0)


class AuditConfig(Frozen):
    """The append-only audit trail (rag_engine/governance/audit.py), kept in the usage ledger's database."""

    enabled: bool = True
    retention_days: int = Field(365, ge=1)
    """Records older than this many days (whole UTC days) may be deleted, and only by an approved action."""
    sensitive_collections: tuple[str, ...] = ()
    """A query that may read any of these collections is audited without its question text."""
    on_write_error: Literal["fail", "log"] = "fail"
    """``fail``: a query whose audit record cannot be written raises (no unaudited answers);
    ``log``: the record is logged instead and the answer is returned."""


class CostsConfig(Frozen):
    """Quality per dollar by generation model (``rag costs --by-model``, the usage_costs asset)."""

    query_rate_per_hour: float = Field(100.0, gt=0)
    """Expected queries per hour: cost per hour = cost per query x this rate."""
    report_dirs: tuple[str, ...] = ("evals/reports", "var/eval")
    """Where eval reports are read (besides ``evals.reports_dir``); the newest per model counts."""
