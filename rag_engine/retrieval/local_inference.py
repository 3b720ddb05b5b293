"""Optional query expansion and rerank through models that declare those capabilities.

Both steps are improvements, never requirements: without a capable model they are skipped
(``local_inference_skipped``), and any provider error or unusable output falls back to the
original query / order (``local_inference_degraded``, with the error type). The query path
therefore answers exactly as it would without local inference whenever the model misbehaves.

Every call is capped (``LocalInferenceConfig``): in output tokens (expansion
``expansion_max_tokens``; the chat-prompt rerank a few tokens per candidate id, at most
``rerank_max_tokens``) and in time, out of the question's budget (``question_budget_s`` from the
question's start): expansion gets ``expansion_share`` of it, the rerank what is left, so a
rerank never runs longer than the question it serves; with nothing left it is skipped
(``question_budget_spent``).

Two rerank methods (``local_inference.rerank_method``): ``endpoint`` scores each candidate on a
rerank endpoint (``defaults.local_rerank_model``, llama.cpp's ``POST /rerank``) and orders by
score; ``chat_prompt`` asks the generation model to order the ids. Rerank only permutes: the
chat model's order must name every given chunk id exactly once, or it is rejected as a whole.
Exact-reference hits (``exact=True``) stay on top whatever the model says:
a question that names a section by its reference is answered by that section, and a semantic
reranker must never bury the one lexical match the user asked for.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from pydantic import BaseModel

from rag_engine.config import Capability, LocalInferenceConfig
from rag_engine.errors import ProviderError, ProviderResponseInvalid
from rag_engine.providers.clients import ModelClient
from rag_engine.retrieval.candidates import Candidate

MAX_EXPANSIONS = 4
DEFAULTS = LocalInferenceConfig()
EXPANSION_MAX_TOKENS = DEFAULTS.expansion_max_tokens
"""max_tokens of an expansion call: four phrasings fit with room to spare; a model that rambles
past it is cut, fails the schema and the query goes on unexpanded."""
RERANK_TEXT_CHARS = DEFAULTS.rerank_text_chars  # per candidate: candidates themselves are untouched


def remaining_s(limits: LocalInferenceConfig, started: float | None) -> float:
    """Seconds left of the question's local inference budget (``started``: the question's
    ``time.perf_counter()``; None: the budget starts now)."""
    spent = 0.0 if started is None else time.perf_counter() - started
    return limits.question_budget_s - spent


def rerank_max_tokens(limits: LocalInferenceConfig, candidates: int) -> int:
    """The chat-prompt rerank's output cap: the JSON plus each id once, never above the ceiling."""
    return min(limits.rerank_max_tokens, 32 + limits.rerank_tokens_per_candidate * candidates)


class Expansion(BaseModel):
    queries: list[str]


class RerankOrder(BaseModel):
    order: list[str]


_EXPAND = """Rewrite the search query below into up to {n} alternative phrasings (synonyms, expanded
abbreviations, the formal term for a colloquial one) that would help a keyword search find relevant passages.
Reply with JSON only: {{"queries": ["...", ...]}}

Query: {query}"""

_RERANK = """Order the passages below by how well they answer the query, best first.
Return every chunk_id exactly once and no other id.
Reply with JSON only: {{"order": ["<chunk_id>", ...]}}

Query: {query}

Passages:
{passages}"""


def _missing(client: ModelClient | None, capability: Capability) -> str | None:
    if client is None:
        return "no_model_configured"
    lacking = [c for c in (capability, "generation") if not client.spec.supports(c)]
    return f"missing_capability:{','.join(lacking)}" if lacking else None


def _skipped(events: list[dict[str, Any]], step: str, reason: str) -> None:
    events.append({"event": "local_inference_skipped", "step": step, "reason": reason})


def _degraded(events: list[dict[str, Any]], step: str, exc: Exception) -> None:
    events.append(
        {"event": "local_inference_degraded", "step": step, "error_type": type(exc).__name__, "detail": str(exc)[:200]}
    )


def _ask(
    client: ModelClient,
    prompt: str,
    schema: type[BaseModel],
    purpose: str,
    run_id: str | None,
    max_tokens: int,
    timeout_s: float,
) -> Any:
    result = client.generate(
        [{"role": "user", "content": prompt}],
        schema=schema,
        purpose=purpose,
        run_id=run_id,
        tolerant=not client.spec.supports("structured_output"),
        max_tokens=max_tokens,
        timeout_s=timeout_s,
    )
    return result.parsed


def expand_query(
    client: ModelClient | None,
    query: str,
    *,
    events: list[dict[str, Any]],
    run_id: str | None = None,
    limits: LocalInferenceConfig = DEFAULTS,
    started: float | None = None,
) -> str:
    """The query followed by up to MAX_EXPANSIONS distinct alternative phrasings, or the query unchanged."""
    step = "query_expansion"
    timeout = min(limits.question_budget_s * limits.expansion_share, remaining_s(limits, started))
    reason = _missing(client, "query_expansion") or (None if query.strip() else "empty_query")
    reason = reason or (None if timeout > 0 else "question_budget_spent")
    if reason:
        _skipped(events, step, reason)
        return query
    assert client is not None, "_missing reports a None client as no_model_configured"
    try:
        prompt = _EXPAND.format(n=MAX_EXPANSIONS, query=query)
        parsed: Expansion = _ask(client, prompt, Expansion, step, run_id, limits.expansion_max_tokens, timeout)
        seen = {query.strip().casefold()}
        extra = []
        for q in (q.strip() for q in parsed.queries):
            if q and q.casefold() not in seen:
                seen.add(q.casefold())
                extra.append(q)
        if not extra:
            raise ProviderResponseInvalid("expansion returned no new query")
    except ProviderError as exc:
        _degraded(events, step, exc)
        return query
    extra = extra[:MAX_EXPANSIONS]
    events.append(
        {"event": "local_inference_applied", "step": step, "model": client.spec.identity, "added": len(extra)}
    )
    return " ".join([query.strip(), *extra])


def _check_permutation(order: list[str], ids: list[str]) -> None:
    given = set(ids)
    unknown = [i for i in order if i not in given]
    missing = given - set(order)
    duplicated = [i for i, n in Counter(order).items() if n > 1]
    if unknown or missing or duplicated:
        raise ProviderResponseInvalid(
            f"rerank order is not a permutation: {len(unknown)} unknown, {len(missing)} missing, "
            f"{len(duplicated)} duplicated id(s)"
        )


def rerank(
    client: ModelClient | None,
    query: str,
    candidates: list[Candidate],
    *,
    events: list[dict[str, Any]],
    run_id: str | None = None,
    limits: LocalInferenceConfig = DEFAULTS,
    started: float | None = None,
    scorer: ModelClient | None = None,
) -> list[Candidate]:
    """The same candidates, reordered by the model with exact hits kept first; or the original
    order. ``scorer``: the rerank endpoint's model (``rerank_method: endpoint``); else ``client``
    orders them by the chat prompt."""
    step = "rerank"
    endpoint = limits.rerank_method == "endpoint"
    timeout = remaining_s(limits, started)
    if endpoint:
        reason = "no_model_configured" if scorer is None else _lacks(scorer, "rerank")
    else:
        reason = _missing(client, "rerank")
    reason = reason or (None if len(candidates) > 1 else "fewer_than_two")
    reason = reason or (None if timeout > 0 else "question_budget_spent")
    if reason:
        _skipped(events, step, reason)
        return list(candidates)
    model = scorer if endpoint else client
    assert model is not None, "a None model is reported as no_model_configured"
    by_id = {c.chunk_id: c for c in candidates}
    try:
        if len(by_id) != len(candidates):
            raise ProviderResponseInvalid("duplicate chunk ids among the candidates: order would be ambiguous")
        if endpoint:
            texts = [f"{c.heading}\n{c.text[: limits.rerank_text_chars]}" for c in candidates]
            scores = model.rerank(query, texts, purpose=step, run_id=run_id, timeout_s=timeout).scores
            # best score first; ties keep the fused order
            order = [c.chunk_id for i, c in sorted(enumerate(candidates), key=lambda p: (-scores[p[0]], p[0]))]
        else:
            passages = "\n\n".join(f"chunk_id={c.chunk_id}\n{c.text[: limits.rerank_text_chars]}" for c in candidates)
            parsed: RerankOrder = _ask(
                model,
                _RERANK.format(query=query, passages=passages),
                RerankOrder,
                step,
                run_id,
                rerank_max_tokens(limits, len(candidates)),
                timeout,
            )
            order = [i.strip() for i in parsed.order]
            _check_permutation(order, list(by_id))
    except ProviderError as exc:
        _degraded(events, step, exc)
        return list(candidates)
    ranked = [by_id[i] for i in order]
    result = [c for c in ranked if c.exact] + [c for c in ranked if not c.exact]
    events.append(
        {
            "event": "local_inference_applied",
            "step": step,
            "method": limits.rerank_method,
            "model": model.spec.identity,
            "changed": [c.chunk_id for c in result] != [c.chunk_id for c in candidates],
        }
    )
    return result


def _lacks(client: ModelClient, capability: Capability) -> str | None:
    return None if client.spec.supports(capability) else f"missing_capability:{capability}"
