"""Query expansion and rerank through the real ModelClient against the loopback server.

Every failure must leave the query path exactly as it would be without local inference (the
original query / order) and say so in an event.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rag_engine.config import ModelConfig, ProviderConfig
from rag_engine.providers.clients import ModelClient, build_client
from rag_engine.providers.ledger import UsageLedger
from rag_engine.providers.ratelimit import RateLimiter
from rag_engine.providers.registry import ModelSpec
from rag_engine.retrieval.candidates import Candidate
from rag_engine.retrieval.local_inference import expand_query, rerank
from tests.support.fake_openai import FakeOpenAI, Reply, invalid_json, ok, server_error

LOCAL_CAPS = ("generation", "structured_output", "query_expansion", "rerank")


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


@pytest.fixture
def make_client(server: FakeOpenAI, tmp_path: Path) -> Iterator[Callable[..., ModelClient]]:
    ledger = UsageLedger(f"sqlite:///{tmp_path / 'usage.sqlite'}")

    def _make(capabilities: tuple[str, ...] = LOCAL_CAPS) -> ModelClient:
        provider = ProviderConfig(
            name="local_llm",
            kind="openai_compatible",
            endpoint=server.base_url,
            timeout_s=2.0,
            max_retries=0,
            backoff_base_s=0.01,
        )
        model = ModelConfig(
            name="local", provider="local_llm", role="generation", served_model="qwen-local", capabilities=capabilities
        )
        return build_client(
            ModelSpec(model=model, provider=provider), ledger=ledger, env={}, root=tmp_path, limiter=RateLimiter()
        )

    yield _make
    ledger.dispose()


def cand(chunk_id: str, *, exact: bool = False) -> Candidate:
    return Candidate(
        chunk_id=chunk_id,
        anchor=chunk_id,
        doc_id="d",
        heading="",
        text=f"text of {chunk_id}",
        collection="public",
        score=1.0,
        sources=("lexical",),
        exact=exact,
    )


def order(*ids: str) -> Reply:
    return ok(json.dumps({"order": list(ids)}))


# -- happy paths --------------------------------------------------------------------------------


def test_expansion_adds_distinct_phrasings(server, make_client) -> None:
    server.enqueue(ok(json.dumps({"queries": ["Notice period", "termination notice", "TERMINATION NOTICE", " "]})))
    events: list[dict] = []
    assert expand_query(make_client(), "notice period", events=events) == "notice period termination notice"
    assert events == [
        {"event": "local_inference_applied", "step": "query_expansion", "model": "local_llm/qwen-local", "added": 1}
    ]
    [call] = server.calls("/chat/completions")
    assert "notice period" in call.body["messages"][0]["content"]
    assert call.body["response_format"]["type"] == "json_schema"


def test_rerank_permutes_the_given_candidates(server, make_client) -> None:
    given = [cand("a"), cand("b"), cand("c")]
    server.enqueue(order("c", "a", "b"))
    events: list[dict] = []
    out = rerank(make_client(), "q", given, events=events)
    assert [c.chunk_id for c in out] == ["c", "a", "b"]
    assert out[0] is given[2]  # the same objects, untouched: only the order changes
    assert events[-1]["event"] == "local_inference_applied" and events[-1]["changed"] is True
    prompt = server.calls("/chat/completions")[0].body["messages"][0]["content"]
    assert all(f"chunk_id={i}" in prompt for i in "abc")


def test_exact_hits_stay_on_top_whatever_the_model_says(server, make_client) -> None:
    given = [cand("x1", exact=True), cand("x2", exact=True), cand("a"), cand("b")]
    server.enqueue(order("b", "x2", "a", "x1"))
    out = rerank(make_client(), "section 4", given, events=[])
    assert [c.chunk_id for c in out] == ["x2", "x1", "b", "a"]


def test_tolerant_parsing_without_structured_output(server, make_client) -> None:
    server.enqueue(ok('The best order is:\n```json\n{"order": ["b", "a"]}\n```'))
    out = rerank(make_client(capabilities=("generation", "rerank")), "q", [cand("a"), cand("b")], events=[])
    assert [c.chunk_id for c in out] == ["b", "a"]
    assert "response_format" not in server.calls("/chat/completions")[0].body


# -- degradation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "error_type"),
    [
        (server_error(500), "ProviderError"),
        (invalid_json(), "ProviderResponseInvalid"),
        (ok("I cannot help with that."), "ProviderResponseInvalid"),
        (ok(json.dumps({"queries": []})), "ProviderResponseInvalid"),
    ],
)
def test_expansion_failures_degrade_to_the_original_query(server, make_client, reply, error_type) -> None:
    server.enqueue(reply)
    events: list[dict] = []
    assert expand_query(make_client(), "notice period", events=events) == "notice period"
    assert len(server.calls("/chat/completions")) == 1  # max_retries=0: one attempt, then degrade
    [event] = events
    assert (event["event"], event["step"], event["error_type"]) == (
        "local_inference_degraded",
        "query_expansion",
        error_type,
    )


@pytest.mark.parametrize(
    ("reply", "error_type"),
    [
        (server_error(500), "ProviderError"),
        (invalid_json(), "ProviderResponseInvalid"),
        (ok('{"order": "a,b,c"}'), "ProviderResponseInvalid"),
        (order("a", "b", "c", "zz"), "ProviderResponseInvalid"),  # unknown id
        (order("a", "b"), "ProviderResponseInvalid"),  # missing id
        (order("a", "b", "b", "c"), "ProviderResponseInvalid"),  # duplicated id
        (order("a", "b", "zz"), "ProviderResponseInvalid"),  # right length, wrong ids
    ],
    ids=["http500", "invalid-json-body", "wrong-schema", "unknown", "missing", "duplicated", "swapped"],
)
def test_rerank_failures_degrade_to_the_original_order(server, make_client, reply, error_type) -> None:
    given = [cand("c"), cand("b"), cand("a")]
    server.enqueue(reply)
    events: list[dict] = []
    out = rerank(make_client(), "q", given, events=events)
    assert out == given
    [event] = events
    assert (event["event"], event["step"], event["error_type"]) == ("local_inference_degraded", "rerank", error_type)


def test_duplicate_candidates_degrade_without_a_call(server, make_client) -> None:
    given = [cand("a"), cand("a"), cand("b")]
    events: list[dict] = []
    assert rerank(make_client(), "q", given, events=events) == given
    assert events[0]["event"] == "local_inference_degraded" and server.requests == []


# -- skipping -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capabilities", "reason"),
    [
        (None, "no_model_configured"),
        (("generation", "structured_output"), None),
        (("query_expansion", "rerank"), "missing_capability:generation"),
    ],
)
def test_missing_capability_skips_without_any_request(server, make_client, capabilities, reason) -> None:
    client = None if capabilities is None else make_client(capabilities=capabilities)
    given = [cand("a"), cand("b")]
    events: list[dict] = []
    assert expand_query(client, "notice period", events=events) == "notice period"
    assert rerank(client, "q", given, events=events) == given
    assert [(e["event"], e["step"]) for e in events] == [
        ("local_inference_skipped", "query_expansion"),
        ("local_inference_skipped", "rerank"),
    ]
    expected = [reason, reason] if reason else ["missing_capability:query_expansion", "missing_capability:rerank"]
    assert [e["reason"] for e in events] == expected
    assert server.requests == []


def test_nothing_to_do_is_skipped(server, make_client) -> None:
    events: list[dict] = []
    assert rerank(make_client(), "q", [cand("a")], events=events) == [cand("a")]
    assert expand_query(make_client(), "  ", events=events) == "  "
    assert [e["reason"] for e in events] == ["fewer_than_two", "empty_query"]
    assert server.requests == []
