"""How many tokens extraction work will take: one estimator for the provider swap dry run (`rag
providers swap`) and the automation's cost gate (rag_assets/automation.py), which price it at the
model's rate.

The ledger's history comes first: the mean tokens per ok graph-extraction call of these packs'
extraction runs, times the calls to make. Without history (no pack extracted yet), a bound from
the prompt: the chunk text (characters / 4) plus the prompt's instructions, schema and lexicon
(PROMPT_OVERHEAD_TOKENS) in, at most ``budgets.max_output_tokens`` out, per call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rag_engine.store.extraction_runs import run_ids
from rag_engine.text.token_count import CHARS_PER_TOKEN

PROMPT_OVERHEAD_TOKENS = 600
"""A chunk's prompt besides its text, in tokens; a coarse allowance used only without history."""


@dataclass(frozen=True)
class TokenEstimate:
    calls: int
    input_tokens: int
    output_tokens: int
    source: str
    """Where the figures come from (ledger history, or the prompt-size bound)."""


def extraction_history(engine: Any, packs: list[str]) -> tuple[int, int, int, str]:
    """(calls, input tokens, output tokens, how) of ok graph-extraction calls of these packs' extraction runs."""
    runs = run_ids(engine.driver, engine.database, packs)
    calls = [
        r for r in engine.ledger.records() if r.purpose == "graph_extraction" and r.status == "ok" and r.run_id in runs
    ]
    return (
        len(calls),
        sum(r.input_tokens for r in calls),
        sum(r.output_tokens for r in calls),
        f"ledger: {len(calls)} extraction calls of {len(runs)} extraction runs of {', '.join(packs) or 'no pack'}",
    )


def extraction_tokens(engine: Any, packs: list[str], calls: int, chars: int) -> TokenEstimate:
    """Tokens of ``calls`` extraction calls over chunks of ``chars`` characters in all."""
    if not calls:
        return TokenEstimate(0, 0, 0, "no calls")
    seen, tin, tout, how = extraction_history(engine, packs) if packs else (0, 0, 0, "no pack extracts")
    if seen:
        return TokenEstimate(calls, round(tin / seen * calls), round(tout / seen * calls), how)
    return TokenEstimate(
        calls,
        chars // CHARS_PER_TOKEN + calls * PROMPT_OVERHEAD_TOKENS,
        calls * engine.cfg.budgets.max_output_tokens,
        f"no ledger history ({how}): chunk characters / {CHARS_PER_TOKEN} + {PROMPT_OVERHEAD_TOKENS} prompt "
        "tokens in, budgets.max_output_tokens out, per call",
    )
