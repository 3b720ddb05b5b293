"""Context assembly under per-category budgets, and answers that cite only what the context holds.

Candidates are built by hand (no Neo4j needed); model calls go through the real ModelClient to
the loopback OpenAI-compatible server.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from pydantic import ValidationError

from rag_engine.config import ContextBudgetsConfig, ModelConfig, ProviderConfig
from rag_engine.providers.clients import ModelClient, build_client
from rag_engine.providers.ledger import UsageLedger
from rag_engine.providers.pricing import load_pricing
from rag_engine.providers.ratelimit import RateLimiter
from rag_engine.providers.registry import ModelSpec
from rag_engine.retrieval.answer import INSUFFICIENT, answer_question, extractive_answer
from rag_engine.retrieval.candidates import Candidate
from rag_engine.retrieval.context import AssembledContext, approx_tokens, assemble_context, render_document
from tests.support.fake_openai import FakeOpenAI, ok, server_error, usage

PRICING = """\
version: "ctx-v1"
currency: USD
models:
  gen-price:
    input_per_million: "1.00"
    output_per_million: "2.00"
"""
BIG = ContextBudgetsConfig(system=1000, documents=10_000, conversation=1000, tools=1000)


def cand(chunk_id: str, text: str = "Some text.", **kw) -> Candidate:
    fields = {
        "anchor": f"a-{chunk_id}",
        "doc_id": "doc1",
        "heading": "",
        "collection": "public",
        "score": 1.0,
        "sources": ("lexical",),
    }
    fields.update(kw)
    return Candidate(chunk_id=chunk_id, text=text, **fields)


def doc_tokens(number: int, c: Candidate) -> int:
    return approx_tokens(render_document(number, c))


# -- context assembly -------------------------------------------------------------------------


def test_approx_tokens_is_chars_over_four_rounded_up() -> None:
    assert [approx_tokens(s) for s in ("", "abc", "abcd", "abcde", "x" * 400)] == [0, 1, 1, 2, 100]


def test_documents_fill_in_candidate_order_whole_chunks_only() -> None:
    small1, big, small2 = cand("c1", "Alpha. " * 10), cand("c2", "Beta " * 400), cand("c3", "Gamma. " * 10)
    budget = doc_tokens(1, small1) + doc_tokens(2, small2) + 5
    ctx = assemble_context(
        [small1, big, small2], budgets=BIG.model_copy(update={"documents": budget}), system_prompt=""
    )
    assert [d.chunk_id for d in ctx.documents] == ["c1", "c3"]
    assert [d.number for d in ctx.documents] == [1, 2]
    assert [d.text for d in ctx.documents] == [small1.text, small2.text]  # never cut mid-chunk
    assert ctx.used["documents"] <= budget
    [over] = ctx.overflow
    assert (over.category, over.item_id, over.reason) == ("documents", "c2", "over_budget")
    assert over.tokens > over.remaining
    assert ctx.cited_ids == {"c1", "c3"}


def test_each_category_has_its_own_budget_and_overflow_is_ordered() -> None:
    turns = [{"role": "user", "content": f"turn {i} " + "x" * 36} for i in range(4)]  # "user: " prefix: 13 tokens each
    tools = [{"name": "lookup", "parameters": {"q": "string"}}, {"name": "huge", "description": "y" * 400}]
    budgets = ContextBudgetsConfig(system=5, documents=10_000, conversation=26, tools=30)
    ctx = assemble_context(
        [cand("c1"), cand("c1"), cand("c2")], budgets=budgets, system_prompt="s" * 40, conversation=turns, tools=tools
    )
    # system too long for its 5 tokens; the large documents budget does not rescue it
    assert ctx.system == () and ctx.system_text == ""
    # the two newest turns fit; the older ones overflow, so the kept history has no gap
    assert [m.index for m in ctx.conversation] == [2, 3]
    assert [t.name for t in ctx.tools] == ["lookup"]
    assert [(o.category, o.item_id, o.reason) for o in ctx.overflow] == [
        ("system", "system", "over_budget"),
        ("documents", "c1", "duplicate_chunk"),
        ("conversation", "conversation[0]", "older_than_dropped_turn"),
        ("conversation", "conversation[1]", "over_budget"),
        ("tools", "tools[1]:huge", "over_budget"),
    ]
    for category in ("system", "documents", "conversation", "tools"):
        assert ctx.used[category] <= getattr(budgets, category)


def test_nothing_is_dropped_silently_even_with_zero_budgets() -> None:
    zero = ContextBudgetsConfig(system=0, documents=0, conversation=0, tools=0)
    ctx = assemble_context(
        [cand("c1"), cand("c2")],
        budgets=zero,
        system_prompt="be brief",
        conversation=[{"role": "user", "content": "hi"}],
        tools=[{"name": "t"}],
    )
    assert (ctx.system, ctx.documents, ctx.conversation, ctx.tools) == ((), (), (), ())
    assert [o.item_id for o in ctx.overflow] == ["system", "c1", "c2", "conversation[0]", "tools[0]:t"]
    assert ctx.cited_ids == frozenset()


def test_documents_carry_provenance() -> None:
    hop = {"source_id": "e1", "target_id": "e2", "type": "AMENDS", "confidence": 0.9, "chunk_id": "ev1"}
    graph = cand("g1", doc_id="doc9", collection="internal", sources=("graph",), path_score=0.9, path=(hop,))
    ref = cand("r1", sources=("reference",), via="Section 4 <- c0")
    exact = cand("x1", exact=True, sources=("exact_reference",), anchor="s-4")
    ctx = assemble_context([exact, graph, ref], budgets=BIG, system_prompt="sys")
    by_id = {d.chunk_id: d for d in ctx.documents}
    assert by_id["g1"].path == (hop,) and by_id["g1"].path_score == 0.9
    assert (by_id["g1"].doc_id, by_id["g1"].collection, by_id["g1"].sources) == ("doc9", "internal", ("graph",))
    assert by_id["r1"].via == "Section 4 <- c0" and by_id["r1"].path is None
    assert by_id["x1"].exact and by_id["x1"].anchor == "s-4"
    assert ctx.system_text == "sys"
    with pytest.raises(ValidationError, match="frozen"):
        ctx.documents[0].chunk_id = "changed"  # frozen at the boundary


def test_custom_token_counter_is_used_and_named() -> None:
    def words(text: str) -> int:
        return len(text.split())

    ctx = assemble_context([cand("c1", "one two three")], budgets=BIG, system_prompt="a b", count_tokens=words)
    assert ctx.token_counter == "words"
    assert ctx.system[0].tokens == 2
    assert ctx.documents[0].tokens == words(render_document(1, ctx.documents[0]))


# -- answers ------------------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


@pytest.fixture
def make_client(server: FakeOpenAI, tmp_path: Path) -> Iterator[Callable[..., ModelClient]]:
    (tmp_path / "pricing.yaml").write_text(PRICING, encoding="utf-8")
    ledger = UsageLedger(f"sqlite:///{tmp_path / 'usage.sqlite'}")

    def _make(capabilities: tuple[str, ...] = ("generation", "structured_output")) -> ModelClient:
        provider = ProviderConfig(
            name="local_llm",
            kind="openai_compatible",
            endpoint=server.base_url,
            timeout_s=2.0,
            max_retries=0,
            backoff_base_s=0.01,
        )
        model = ModelConfig(
            name="gen",
            provider="local_llm",
            role="generation",
            served_model="local-gen",
            capabilities=capabilities,
            pricing_ref="gen-price",
        )
        return build_client(
            ModelSpec(model=model, provider=provider),
            ledger=ledger,
            pricing=load_pricing(tmp_path / "pricing.yaml"),
            env={},
            root=tmp_path,
            limiter=RateLimiter(),
        )

    yield _make
    ledger.dispose()


def _context(*candidates: Candidate) -> AssembledContext:
    return assemble_context(list(candidates), budgets=BIG, system_prompt="You answer questions about contracts.")


def _draft(answer: str, citations: list[str], insufficient: bool = False) -> str:
    return json.dumps({"answer": answer, "citations": citations, "insufficient_evidence": insufficient})


def test_citations_outside_the_context_are_dropped_and_counted(server, make_client) -> None:
    ctx = _context(cand("c1", "Notice period is 30 days."), cand("c2", "Other clause."))
    server.enqueue(ok(_draft("Thirty days [c1].", ["c1", "foreign-9", "c1"]), usage=usage(1000, 500)))
    ans = answer_question(make_client(), "What is the notice period?", ctx)
    assert ans.citations == ("c1",)
    assert ans.dropped_citations == 1 and ans.dropped_citation_ids == ("foreign-9",)
    assert not ans.insufficient_evidence and ans.reason is None and ans.method == "model"
    assert ans.text == "Thirty days [c1]."
    assert ans.cost == Decimal("0.002")  # 1000 * 1/M + 500 * 2/M
    [call] = server.calls("/chat/completions")
    assert call.body["response_format"]["type"] == "json_schema"
    prompt = call.body["messages"][-1]["content"]
    assert "[1] chunk_id=c1" in prompt and "[2] chunk_id=c2" in prompt and "What is the notice period?" in prompt
    assert call.body["messages"][0] == {"role": "system", "content": "You answer questions about contracts."}


def test_only_foreign_citations_means_insufficient_evidence(server, make_client) -> None:
    server.enqueue(ok(_draft("Made up.", ["nowhere-1"])))
    ans = answer_question(make_client(), "q", _context(cand("c1")))
    assert ans.insufficient_evidence and ans.text == INSUFFICIENT
    assert ans.reason == "no_valid_citations" and ans.citations == () and ans.dropped_citations == 1


def test_model_saying_insufficient_is_respected(server, make_client) -> None:
    server.enqueue(ok(_draft("Maybe 30 days", ["c1"], insufficient=True)))
    ans = answer_question(make_client(), "q", _context(cand("c1")))
    assert ans.insufficient_evidence and ans.text == INSUFFICIENT and ans.reason == "model_insufficient"
    assert ans.citations == ()


def test_empty_context_is_insufficient_without_any_model_call(server, make_client) -> None:
    empty = assemble_context(
        [cand("c1", "x" * 400)], budgets=BIG.model_copy(update={"documents": 10}), system_prompt="sys"
    )
    assert empty.documents == () and empty.overflow[0].item_id == "c1"
    ans = answer_question(make_client(), "q", empty)
    assert ans.insufficient_evidence and ans.reason == "empty_context" and ans.text == INSUFFICIENT
    assert server.requests == []


def test_tolerant_parsing_when_the_model_lacks_structured_output(server, make_client) -> None:
    prose = "Sure! Here it is:\n```json\n" + _draft("Thirty days.", ["c2"]) + "\n```\nHope that helps."
    server.enqueue(ok(prose))
    ans = answer_question(make_client(capabilities=("generation",)), "q", _context(cand("c1"), cand("c2")))
    assert ans.citations == ("c2",) and ans.text == "Thirty days." and not ans.insufficient_evidence
    [call] = server.calls("/chat/completions")
    assert "response_format" not in call.body


def test_extractive_fallback_cites_only_context_ids(server, make_client) -> None:
    too_big = cand("big", "Huge. " * 500)
    top = cand("c1", "The notice period is 30 days. It starts on receipt. Further text follows here.")
    ctx = assemble_context(
        [too_big, top, cand("c2")], budgets=BIG.model_copy(update={"documents": 100}), system_prompt=""
    )
    assert "big" not in ctx.cited_ids
    ans = extractive_answer(ctx, "q", max_units=2, fallback="no_generation_model")
    assert ans.citations == ("c1",) and ans.method == "extractive" and not ans.insufficient_evidence
    # a question with no content word: the top block's units in order, with its block number
    assert ans.text == "The notice period is 30 days. It starts on receipt. [1]"
    # no client, or a client that cannot generate: the same extractive answer, no request made
    assert answer_question(None, "q", ctx, extractive={"max_units": 2}) == ans
    assert answer_question(make_client(capabilities=("embeddings",)), "q", ctx, extractive={"max_units": 2}) == ans
    assert server.requests == []
    assert extractive_answer(_context()).insufficient_evidence


def test_provider_failure_falls_back_to_extractive(server, make_client) -> None:
    server.enqueue(server_error(500))
    ans = answer_question(make_client(), "q", _context(cand("c1", "First. Second. Third.")))
    assert ans.method == "extractive" and ans.error_type == "ProviderError" and ans.fallback == "generation_failed"
    assert ans.citations == ("c1",) and ans.text == "First. Second. Third. [1]"
    assert len(server.calls("/chat/completions")) == 1  # max_retries=0
