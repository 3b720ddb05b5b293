"""The engine against a real LLM server: structured output forms, extraction validated and
grounded by the engine, answers and query expansion, usage with the server's own token counts,
budgets, degradation and bounded timeouts. Contract only: nothing here depends on what the
model says, only on what the engine does with it (see conftest.py)."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from rag_engine.config import EngineConfig
from rag_engine.engine import Engine
from rag_engine.errors import ProviderResponseInvalid, ProviderTimeout
from rag_engine.graph.entity_resolution import EntityResolver, normalize_name
from rag_engine.graph.extraction import grounding_words, occurs_in
from rag_engine.graph.models import RawExtraction
from rag_engine.ingest.documents import discover
from rag_engine.ingest.extraction_step import EXTRACTION, _cache, chunk_cache_keys
from rag_engine.ingest.pipeline import ingest_pack
from rag_engine.ingest.steps import load_chunks
from rag_engine.packs import DomainPack
from rag_engine.providers.clients import ModelClient, build_client
from rag_engine.providers.openai_backend import structured_request
from rag_engine.providers.ratelimit import RateLimiter
from rag_engine.providers.registry import ModelSpec, resolve_endpoint
from rag_engine.retrieval.answer import answer_question
from rag_engine.retrieval.context import assemble_context
from rag_engine.retrieval.local_inference import Expansion, expand_query
from rag_engine.retrieval.query import SYSTEM_PROMPT, run_query
from tests.conftest import ROOT, _embed_env, _neo4j_uri, with_artifacts
from tests.real_model.conftest import ENDPOINT_ENV, MODEL, assert_handled, lane_config
from tests.support.packs import temp_pack

QUESTIONS = (
    "Where does the Regulation apply to processing by a controller not established in the Union?",
    "Which processing of personal data does the Regulation not apply to?",
    "What does the Regulation protect?",
)


REJECTION_REASONS = {
    "empty_name",
    "unknown_entity_type",
    "entity_not_in_chunk",
    "unknown_relationship_type",
    "confidence_out_of_range",
    "endpoint_not_extracted",
    "self_loop",
    "duplicate",
}
"""Every reason validation may give, written out (rag_engine/graph/extraction.py's docstring)."""


class Person(BaseModel):
    name: str
    age: int


def _gdpr_articles(n: int) -> str:
    """The first ``n`` articles of the shipped GDPR chapter I, as one document."""
    text = (ROOT / "packs/legal_regulatory/corpus/gdpr-ch01.md").read_text(encoding="utf-8")
    parts = text.split("\n## ")
    return "\n## ".join(parts[: n + 1]) + "\n"


def _client(engine: Engine, **provider: Any) -> ModelClient:
    spec = engine.registry.spec(MODEL)
    spec = ModelSpec(model=spec.model, provider=spec.provider.model_copy(update=provider))
    return build_client(spec, ledger=engine.ledger, env=engine.env, root=engine.root, limiter=RateLimiter())


# -- one engine, one small GDPR pack ingested through the real server ---------------------------


@pytest.fixture(scope="module")
def ingested(
    llm_endpoint: str, base_config: EngineConfig, tmp_path_factory: pytest.TempPathFactory, neo4j_driver
) -> Iterator[tuple[Engine, DomainPack, str]]:
    base = tmp_path_factory.mktemp("real-model")
    env = {
        "NEO4J_URI": _neo4j_uri(),
        "RAG_LEDGER_URL": f"sqlite:///{base / 'ledger.sqlite'}",
        ENDPOINT_ENV: llm_endpoint,
        **_embed_env(),
    }
    cfg = with_artifacts(lane_config(base_config, max_chunks_per_run=3), base / "artifacts")
    engine = Engine(cfg, ROOT, env)
    name = "t" + uuid.uuid4().hex[:10]  # the throwaway pack names conftest removes at exit
    pack = temp_pack(engine, name, base / "corpus", {"gdpr-ch01-part.md": _gdpr_articles(4)}, base="legal_regulatory")
    run_id = f"run-{name}"
    reports = ingest_pack(engine, pack, run_id=run_id)
    assert not reports["source_documents"].rejected and not reports["llm_extraction"].failed
    yield engine, pack, run_id
    engine.close()


def test_extraction_keeps_only_validated_grounded_records(ingested) -> None:
    engine, pack, run_id = ingested
    [key] = [ref.partition_key for ref in discover(pack)]
    chunks = load_chunks(engine, pack, key)
    artifact = engine.artifacts.read(pack.name, key, EXTRACTION)
    called = [c for c in chunks if c.chunk_id not in artifact["skipped"]]

    # the budget: 3 calls at most, the other chunks skipped (a later run continues them), and
    # every call's output within max_tokens
    assert len(chunks) > 3 and len(called) == 3
    assert set(artifact["skipped"].values()) == {"max_chunks_per_run"}
    calls = [r for r in engine.ledger.records(run_id) if r.purpose == "graph_extraction"]
    assert len(calls) == 3
    assert all(0 < r.output_tokens <= engine.cfg.budgets.max_output_tokens for r in calls)
    assert all(r.input_tokens > 0 and r.latency_ms > 0 and r.provider == "local_smollm" for r in calls)
    assert sum(r.input_tokens + r.output_tokens for r in calls) <= engine.cfg.budgets.max_tokens_per_run

    # a call whose output failed the schema is a counted failure with its tokens, not a record
    cache = _cache(engine)
    keys = dict(zip((c.chunk_id for c in chunks), chunk_cache_keys(engine, pack, chunks), strict=True))
    answered = {c.chunk_id: cache.get(keys[c.chunk_id]) for c in called}
    valid = {cid for cid, hit in answered.items() if hit}
    assert set(artifact["failed"]) == set(answered) - valid
    assert set(artifact["failed"].values()) <= {"ProviderResponseInvalid"}
    statuses = Counter(r.status for r in calls)
    assert (statuses["ok"], statuses["error"]) == (len(valid), len(called) - len(valid))

    # rejections of the model's real answers, by the two rules a reader checks by eye (validation
    # runs them first, whatever else is wrong): a type outside the pack's lists is rejected as such,
    # each time. The other reasons are asserted on known answers in test_real_model_handling.py.
    raws = [RawExtraction.model_validate(answered[cid]["raw"]) for cid in sorted(valid)]
    named = [e for raw in raws for e in raw.entities if normalize_name(e.name)]
    rejected = Counter(artifact["rejected"])
    assert rejected["unknown_entity_type"] == sum(1 for e in named if e.type not in pack.manifest.entity_types)
    assert rejected["unknown_relationship_type"] == sum(
        1 for raw in raws for r in raw.relationships if r.type not in pack.manifest.relationship_types
    )
    assert set(rejected) <= REJECTION_REASONS
    resolver = EntityResolver(pack.name, pack.manifest.aliases)

    # what was kept is grounded in its chunk and typed from the pack's whitelist
    by_id = {c.chunk_id: c for c in chunks}
    kept: set[tuple[str, str]] = set()
    for record in artifact["records"]:
        chunk = by_id[record["chunk_id"]]
        words = f" {' '.join(grounding_words(chunk.heading + chr(10) + chunk.text))} "
        for e in record["entities"]:
            assert e["type"] in pack.manifest.entity_types
            assert any(occurs_in(f, words) for f in resolver.surface_forms(e["name"])), e["name"]
            kept.add((e["entity_id"], record["chunk_id"]))
        for r in record["relationships"]:
            assert r["type"] in pack.manifest.relationship_types and 0.0 <= r["confidence"] <= 1.0

    # and Neo4j holds exactly what validation kept: nothing the model said reached it unchecked
    rows, _, _ = engine.driver.execute_query(
        "MATCH (e:Entity)-[m:MENTIONED_IN {pack: $pack}]->(c:Chunk) RETURN e.entity_id AS e, c.chunk_id AS c",
        pack=pack.name,
        database_=engine.database,
    )
    assert {(r["e"], r["c"]) for r in rows} == kept


def test_answers_and_expansion_on_real_questions(ingested) -> None:
    engine, pack, _ = ingested
    identity = engine.registry.spec(MODEL).identity
    # an engine searches only the packs it serves: this one serves the lane's GDPR articles, so each
    # question has passages that answer it (queried through `engine`, the context was empty and the
    # answer "insufficient evidence" before any call, whatever the model)
    served = Engine(engine.cfg, engine.root, engine.env, packs=[pack])
    try:
        for question in QUESTIONS:
            run_id = f"q-{uuid.uuid4().hex[:8]}"
            outcome = run_query(served, question, "legal_analyst", run_id=run_id)
            events = {e["step"]: e for e in outcome.events if e.get("event", "").startswith("local_inference")}
            # expansion ran on the real model: applied, or degraded to the original query
            assert events["query_expansion"]["event"] in ("local_inference_applied", "local_inference_degraded")
            if events["query_expansion"]["event"] == "local_inference_degraded":
                assert outcome.expanded_query == question
            else:
                assert outcome.expanded_query.startswith(question)
            assert events["rerank"] == {
                "event": "local_inference_skipped",
                "step": "rerank",
                "reason": "missing_capability:rerank",
            }
            # each question is answered by the articles: it reaches the model, whose answer the engine
            # handles for the branch it took (conftest.assert_handled)
            assert outcome.context.documents, question
            assert_handled(outcome.answer, outcome.context.cited_ids, identity)
            # every call of this query is metered with the server's counts
            records = served.ledger.records(run_id)
            assert Counter(r.purpose for r in records) == Counter({"query_expansion": 1, "answer": 1})
            for r in records:  # a call that timed out was not answered: no tokens, its error type
                assert (r.input_tokens > 0 and r.latency_ms > 0) if r.status == "ok" else r.error_type is not None
    finally:
        served.close()


def test_a_cut_answer_degrades_to_the_extractive_one(ingested) -> None:
    engine, pack, _ = ingested
    [key] = [ref.partition_key for ref in discover(pack)]
    from rag_engine.retrieval.candidates import Candidate

    chunk = load_chunks(engine, pack, key)[0]
    cand = Candidate(
        chunk_id=chunk.chunk_id,
        anchor=chunk.chunk_id,
        doc_id=chunk.doc_id,
        heading=chunk.heading,
        text=chunk.text,
        collection="legal_public",
        score=1.0,
        sources=("lexical",),
    )
    context = assemble_context([cand], budgets=engine.cfg.context, system_prompt=SYSTEM_PROMPT)
    # 6 tokens cannot close the JSON the schema asks for: the server's answer is cut at max_tokens
    answer = answer_question(engine.client(MODEL), QUESTIONS[2], context, max_tokens=6)
    assert answer.method == "extractive" and answer.error_type == "ProviderResponseInvalid"
    assert answer.citations == (chunk.chunk_id,)


# -- the wire: each structured output form, the server's own token counts, timeouts -----------


@pytest.fixture
def engine(lane_engine: Engine) -> Engine:
    return lane_engine


@pytest.mark.parametrize("form", ["json_schema", "json_object_schema", "json_object", "structured_outputs"])
def test_each_structured_output_form_is_accepted(engine: Engine, form: str) -> None:
    client = _client(engine, structured_output_form=form)
    messages = [{"role": "user", "content": "Rewrite as search queries: data breach notification"}]
    try:
        record = client.generate(messages, schema=Expansion, purpose="form_check", max_tokens=48).usage
    except ProviderResponseInvalid as exc:  # accepted, answered, but the answer is unusable: fine
        record = exc.usage  # type: ignore[assignment]
    assert record is not None and record.purpose == "form_check"
    # never a refusal of the request (HTTP 4xx): the form is one the server reads
    assert record.input_tokens > 0 and 0 < record.output_tokens <= 48


def test_usage_records_carry_the_servers_token_counts(engine: Engine) -> None:
    client = _client(engine)
    messages = [{"role": "user", "content": "Give a person as JSON."}]
    result = client.generate(messages, schema=Person, purpose="usage_check", max_tokens=40)
    # the same request straight to the server (greedy decoding: the same tokens)
    spec = engine.registry.spec(MODEL)
    body = {"model": spec.model.served_model, "messages": messages, "max_tokens": 40}
    body.update(structured_request(Person, "json_schema"))
    url = resolve_endpoint(spec.provider, engine.env)
    started = time.perf_counter()
    raw = httpx.post(f"{url}/chat/completions", json=body, timeout=60).json()
    direct_ms = (time.perf_counter() - started) * 1000
    assert (result.usage.input_tokens, result.usage.output_tokens) == (
        raw["usage"]["prompt_tokens"],
        raw["usage"]["completion_tokens"],
    )
    assert result.usage.reported_model == raw["model"]
    # the recorded latency is the call's wall time: the same order as the direct call's
    assert 0 < result.usage.latency_ms < direct_ms * 5 + 1000
    [stored] = [r for r in engine.ledger.records() if r.purpose == "usage_check"]
    assert (stored.input_tokens, stored.output_tokens, stored.latency_ms) == (
        result.usage.input_tokens,
        result.usage.output_tokens,
        result.usage.latency_ms,
    )


def test_timeouts_are_bounded_and_free_the_server(engine: Engine) -> None:
    slow = _client(engine, timeout_s=1.0, max_retries=0)
    # ~360 prompt tokens: evaluating them alone takes longer than the 1 s timeout, whatever the model
    # would answer (one thread evaluates 60-300 prompt tokens/s). The server cannot interrupt a
    # prompt evaluation already under way, only what follows it: the next call waits for the rest of
    # the prompt (~6 s at 60 tokens/s), never for the 400 tokens (~20 s in all, measured on one
    # thread). A 1,000-token prompt took 18 s to evaluate on one thread, longer than the bound.
    long_prompt = [{"role": "user", "content": "Summarize: " + "the controller shall notify the breach. " * 50}]
    started = time.perf_counter()
    with pytest.raises(ProviderTimeout) as err:
        slow.generate(long_prompt, schema=Expansion, purpose="timeout_check", max_tokens=400)
    assert time.perf_counter() - started < 5
    assert err.value.usage is not None and err.value.usage.error_type == "ProviderTimeout"
    # the abandoned generation was stopped: the next call does not wait for 400 tokens
    quick = _client(engine)
    started = time.perf_counter()
    quick.generate([{"role": "user", "content": "Say hi"}], purpose="after_timeout", max_tokens=4)
    assert time.perf_counter() - started < 10


def test_expansion_degrades_to_the_original_query_on_a_timeout(engine: Engine) -> None:
    events: list[dict[str, Any]] = []
    # a question no earlier test asked, long enough that the server cannot answer from its prompt
    # cache within the 0.05 s the client allows (on an idle machine a cached prompt answered in time)
    nonce = uuid.uuid4().hex
    question = f"Case {nonce}: " + " ".join(["What must a controller do after a personal data breach?"] * 12)
    assert expand_query(_client(engine, timeout_s=0.05, max_retries=0), question, events=events) == question
    assert events[0]["event"] == "local_inference_degraded" and events[0]["error_type"] == "ProviderTimeout"


def test_a_token_budget_too_small_for_one_call_makes_no_call(
    llm_endpoint: str, base_config: EngineConfig, tmp_path: Path, neo4j_driver
) -> None:
    env = {
        "NEO4J_URI": _neo4j_uri(),
        "RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}",
        ENDPOINT_ENV: llm_endpoint,
        **_embed_env(),
    }
    engine = Engine(with_artifacts(lane_config(base_config, max_tokens_per_run=100), tmp_path / "artifacts"), ROOT, env)
    try:
        name = "t" + uuid.uuid4().hex[:10]  # the throwaway pack names conftest removes at exit
        files = {"gdpr-ch01-first.md": _gdpr_articles(2)}
        pack = temp_pack(engine, name, tmp_path / "corpus", files, base="legal_regulatory")
        ingest_pack(engine, pack, run_id=f"run-{name}")
        [key] = [ref.partition_key for ref in discover(pack)]
        artifact = engine.artifacts.read(pack.name, key, EXTRACTION)
        assert artifact["records"] == [] and set(artifact["skipped"].values()) == {"max_tokens_per_run"}
        assert [r for r in engine.ledger.records() if r.purpose == "graph_extraction"] == []
    finally:
        engine.close()
