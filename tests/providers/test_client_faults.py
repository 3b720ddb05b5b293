"""ModelClient against the loopback server, one fault at a time: chat completions through the real
openai SDK, embeddings over plain HTTP (no SDK), the same faults mapped onto the same errors."""

from __future__ import annotations

import time
from decimal import Decimal

import pytest
from pydantic import BaseModel

from rag_engine.errors import (
    CapabilityNotSupported,
    MissingCredential,
    ProviderError,
    ProviderRateLimited,
    ProviderResponseInvalid,
    ProviderTimeout,
)
from rag_engine.providers.ledger import UsageLedger
from tests.support import fake_openai as fake
from tests.support.fake_openai import FakeOpenAI

Q = [{"role": "user", "content": "What does article 5 say?"}]


class Answer(BaseModel):
    answer: str
    chunk_ids: list[str]


# -- normal answers and usage -----------------------------------------------------------


def test_plain_generation_records_usage_and_cost(make_client, server: FakeOpenAI, ledger: UsageLedger) -> None:
    server.enqueue(fake.ok("Article 5 covers ...", usage=fake.usage(120, 30)))
    result = make_client().generate(Q, purpose="answer", run_id="run-1")
    assert result.text == "Article 5 covers ..." and result.parsed is None
    [rec] = ledger.records()
    assert rec == result.usage
    assert (rec.status, rec.purpose, rec.run_id, rec.provider) == ("ok", "answer", "run-1", "test_openai")
    assert (rec.input_tokens, rec.output_tokens) == (120, 30)
    assert rec.cached_input_tokens is None and rec.reasoning_tokens is None  # not reported, not 0
    assert rec.cost == Decimal("0.0006")  # 120 * 2.5e-6 + 30 * 1e-5
    assert rec.latency_ms >= 0
    assert server.calls("/chat/completions")[0].body["model"] == "served-model-1"


def test_cached_and_reasoning_tokens_are_recorded_and_priced(make_client, server: FakeOpenAI) -> None:
    server.enqueue(fake.ok(usage=fake.usage(2000, 500, cached=1500, reasoning=300)))
    rec = make_client().generate(Q, purpose="t").usage
    assert (rec.input_tokens, rec.cached_input_tokens, rec.output_tokens, rec.reasoning_tokens) == (
        2000,
        1500,
        500,
        300,
    )
    # 500 uncached * 2.50 + 1500 cached * 1.25 + 500 output * 10.00, per million
    assert rec.cost == Decimal("0.00125") + Decimal("0.001875") + Decimal("0.005")


def test_reported_cached_zero_stays_zero(make_client, server: FakeOpenAI) -> None:
    server.enqueue(fake.ok(usage=fake.usage(100, 10, cached=0, reasoning=0)))
    rec = make_client().generate(Q, purpose="t").usage
    assert rec.cached_input_tokens == 0 and rec.reasoning_tokens == 0


def test_reported_model_mismatch_is_kept(make_client, server: FakeOpenAI, ledger: UsageLedger) -> None:
    server.enqueue(fake.ok(model="served-model-1-2026-06-01"))
    make_client().generate(Q, purpose="t")
    [rec] = ledger.records()
    assert rec.requested_model == "served-model-1"
    assert rec.reported_model == "served-model-1-2026-06-01"


def test_unknown_pricing_gives_cost_none_and_the_call_succeeds(make_client, server: FakeOpenAI, ledger) -> None:
    result = make_client(pricing_ref="not-in-the-table").generate(Q, purpose="t")
    assert result.text.startswith("echo:")
    assert result.usage.status == "ok" and result.usage.cost is None
    assert result.usage.pricing_version == "test-v1"
    assert ledger.records()[0].cost is None


def test_missing_usage_block_means_unknown_cost(make_client, server: FakeOpenAI) -> None:
    body = {
        "object": "chat.completion",
        "model": "x",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
    }
    server.enqueue(fake.Reply(body=body))
    rec = make_client().generate(Q, purpose="t").usage
    assert rec.status == "ok" and rec.cost is None


def test_structured_output_sends_a_json_schema_and_parses(make_client, server: FakeOpenAI) -> None:
    server.enqueue(fake.ok('{"answer": "yes", "chunk_ids": ["c1", "c2"]}'))
    result = make_client().generate(Q, schema=Answer, purpose="t", max_tokens=64)
    assert result.parsed == Answer(answer="yes", chunk_ids=["c1", "c2"])
    body = server.calls("/chat/completions")[0].body
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["name"] == "Answer"
    assert body["max_completion_tokens"] == 64 and "max_tokens" not in body  # hosted OpenAI parameter


def test_local_compatible_server_gets_max_tokens(make_client, server: FakeOpenAI) -> None:
    make_client(kind="openai_compatible", credential_env=None, env={}).generate(Q, purpose="t", max_tokens=32)
    body = server.calls("/chat/completions")[0].body
    assert body["max_tokens"] == 32 and "max_completion_tokens" not in body


def test_structured_output_that_does_not_match_is_invalid_but_its_tokens_are_kept(
    make_client, server: FakeOpenAI, ledger: UsageLedger
) -> None:
    server.enqueue(fake.ok('{"answer": 1}', usage=fake.usage(50, 5)))
    with pytest.raises(ProviderResponseInvalid) as info:
        make_client().generate(Q, schema=Answer, purpose="t")
    assert '{"answer"' not in str(info.value)  # the output is not quoted back
    [rec] = ledger.records()
    assert (rec.status, rec.error_type, rec.input_tokens) == ("error", "ProviderResponseInvalid", 50)


def test_tolerant_mode_parses_json_out_of_plain_text(make_client, server: FakeOpenAI) -> None:
    client = make_client(capabilities=("generation",))
    server.enqueue(fake.ok('Sure! ```json\n{"answer": "ok", "chunk_ids": []}\n``` hope that helps'))
    result = client.generate(Q, schema=Answer, purpose="t", tolerant=True)
    assert result.parsed == Answer(answer="ok", chunk_ids=[])
    assert "response_format" not in server.calls("/chat/completions")[0].body  # not a structured request


# -- capabilities: refused before any network call -------------------------------------


def test_missing_structured_output_capability_raises_before_any_request(
    make_client, server: FakeOpenAI, ledger: UsageLedger
) -> None:
    client = make_client(capabilities=("generation",))
    with pytest.raises(CapabilityNotSupported):
        client.generate(Q, schema=Answer, purpose="t")
    assert server.requests == [] and ledger.count() == 0


def test_missing_generation_capability_raises_before_any_request(make_client, server: FakeOpenAI) -> None:
    with pytest.raises(CapabilityNotSupported):
        make_client(capabilities=("embeddings",), role="embedding").generate(Q, purpose="t")
    assert server.requests == []


def test_missing_embeddings_capability_raises_before_any_request(make_client, server: FakeOpenAI) -> None:
    with pytest.raises(CapabilityNotSupported):
        make_client(capabilities=("generation",)).embed(["a"], purpose="t")
    assert server.requests == []


# -- retries ------------------------------------------------------------------------------


def test_429_retry_after_seconds_is_honoured(make_client, server: FakeOpenAI, ledger: UsageLedger) -> None:
    server.enqueue(fake.rate_limited(retry_after_s=0.2), fake.ok("done"))
    start = time.monotonic()
    result = make_client().generate(Q, purpose="t")
    elapsed = time.monotonic() - start
    assert result.text == "done"
    assert elapsed >= 0.2
    assert len(server.calls("/chat/completions")) == 2
    assert ledger.count() == 1 and ledger.count(status="ok") == 1  # one record per call, not per attempt


def test_429_retry_after_ms_is_preferred_and_honoured(make_client, server: FakeOpenAI) -> None:
    server.enqueue(fake.rate_limited(retry_after_ms=250, retry_after_s=30), fake.ok("done"))
    start = time.monotonic()
    assert make_client().generate(Q, purpose="t").text == "done"
    elapsed = time.monotonic() - start
    assert 0.25 <= elapsed < 5  # the 30 s header would have made this slow


def test_503_retry_after_is_honoured(make_client, server: FakeOpenAI) -> None:
    server.enqueue(fake.server_error(503, headers={"retry-after": "0.2"}), fake.ok("done"))
    start = time.monotonic()
    assert make_client().generate(Q, purpose="t").text == "done"
    assert time.monotonic() - start >= 0.2


def test_500_is_retried_with_backoff_then_succeeds(make_client, server: FakeOpenAI) -> None:
    server.enqueue(fake.server_error(500), fake.ok("done"))
    start = time.monotonic()
    assert make_client(backoff_base_s=0.15).generate(Q, purpose="t").text == "done"
    assert time.monotonic() - start >= 0.15
    assert len(server.calls()) == 2


def test_persistent_500_fails_after_max_retries(make_client, server: FakeOpenAI, ledger: UsageLedger) -> None:
    server.enqueue(*[fake.server_error(500)] * 5)
    with pytest.raises(ProviderError) as info:
        make_client(max_retries=2).generate(Q, purpose="t", run_id="r")
    assert type(info.value) is ProviderError
    assert "HTTP 500" in str(info.value) and "3 attempt" in str(info.value)
    assert len(server.calls()) == 3
    [rec] = ledger.records()
    assert (rec.status, rec.error_type, rec.run_id, rec.input_tokens, rec.output_tokens) == (
        "error",
        "ProviderError",
        "r",
        0,
        0,
    )


def test_persistent_429_raises_rate_limited(make_client, server: FakeOpenAI, ledger: UsageLedger) -> None:
    server.enqueue(*[fake.rate_limited(retry_after_ms=20)] * 3)
    with pytest.raises(ProviderRateLimited):
        make_client(max_retries=2).generate(Q, purpose="t")
    assert len(server.calls()) == 3
    assert ledger.records()[0].error_type == "ProviderRateLimited"


def test_retry_after_beyond_the_cap_fails_fast(make_client, server: FakeOpenAI) -> None:
    server.enqueue(fake.rate_limited(retry_after_s=3600))
    start = time.monotonic()
    with pytest.raises(ProviderRateLimited) as info:
        make_client().generate(Q, purpose="t")
    assert time.monotonic() - start < 2
    assert len(server.calls()) == 1 and "3600" in str(info.value)


def test_client_errors_are_not_retried(make_client, server: FakeOpenAI) -> None:
    server.enqueue(fake.Reply(status=400, body={"error": {"message": "context length exceeded"}}))
    with pytest.raises(ProviderError) as info:
        make_client().generate(Q, purpose="t")
    assert "HTTP 400" in str(info.value) and "context length exceeded" in str(info.value)
    assert len(server.calls()) == 1


def test_timeout_raises_provider_timeout_after_retries(make_client, server: FakeOpenAI, ledger: UsageLedger) -> None:
    server.enqueue(fake.slow(5), fake.slow(5))
    start = time.monotonic()
    with pytest.raises(ProviderTimeout):
        make_client(timeout_s=0.3, max_retries=1).generate(Q, purpose="t")
    elapsed = time.monotonic() - start
    assert 0.6 <= elapsed < 3
    assert len(server.calls()) == 2
    assert ledger.records()[0].error_type == "ProviderTimeout"


def test_a_call_cap_never_lengthens_the_providers_timeout(make_client, server: FakeOpenAI) -> None:
    """A question's budget (timeout_s=5) shortens a call; it must not stretch a provider configured
    at 0.3 s (local expansion asked for 3 s and a 0.05 s provider waited for the answer)."""
    server.enqueue(fake.slow(5))
    start = time.monotonic()
    with pytest.raises(ProviderTimeout):
        make_client(timeout_s=0.3, max_retries=0).generate(Q, purpose="t", timeout_s=5)
    assert time.monotonic() - start < 2


def test_timeout_then_success(make_client, server: FakeOpenAI) -> None:
    server.enqueue(fake.slow(5), fake.ok("late but fine"))
    assert make_client(timeout_s=0.3, max_retries=1).generate(Q, purpose="t").text == "late but fine"


def test_connection_refused_is_a_provider_error(make_client, server: FakeOpenAI) -> None:
    with FakeOpenAI() as gone:
        url = gone.base_url
    with pytest.raises(ProviderError) as info:
        make_client(endpoint=url, max_retries=1).generate(Q, purpose="t")
    assert "connection failed" in str(info.value)


# -- broken bodies: not retried (the provider already did, and billed, the work) ------------


@pytest.mark.parametrize(
    "reply", [fake.truncated(), fake.invalid_json(), fake.wrong_shape()], ids=["truncated", "invalid", "shape"]
)
def test_broken_bodies_raise_response_invalid(make_client, server: FakeOpenAI, ledger: UsageLedger, reply) -> None:
    server.enqueue(reply)
    with pytest.raises(ProviderResponseInvalid):
        make_client().generate(Q, purpose="t")
    assert len(server.calls()) == 1
    [rec] = ledger.records()
    assert (rec.status, rec.error_type) == ("error", "ProviderResponseInvalid")


def test_truncated_embeddings_body_raises_response_invalid(make_client, server: FakeOpenAI) -> None:
    server.enqueue(fake.truncated())
    with pytest.raises(ProviderResponseInvalid):
        make_client(role="embedding", capabilities=("embeddings",)).embed(["a"], purpose="t")


# -- embeddings ---------------------------------------------------------------------------


def test_embeddings_return_vectors_and_usage(make_client, server: FakeOpenAI, ledger: UsageLedger) -> None:
    client = make_client(role="embedding", capabilities=("embeddings",), pricing_ref="embed-model")
    server.enqueue(fake.Reply(usage={"prompt_tokens": 1000, "total_tokens": 1000}))
    result = client.embed(["alpha", "beta gamma"], purpose="index", run_id="r")
    assert len(result.vectors) == 2 and all(len(v) == 8 for v in result.vectors)
    assert result.vectors[0] != result.vectors[1]
    assert server.calls("/embeddings")[0].body["input"] == ["alpha", "beta gamma"]
    rec = ledger.records()[0]
    assert (rec.input_tokens, rec.output_tokens, rec.cost) == (1000, 0, Decimal("0.00002"))


def test_embedding_dimension_mismatch_is_invalid(make_client, server: FakeOpenAI) -> None:
    client = make_client(role="embedding", capabilities=("embeddings",), dimension=16)
    with pytest.raises(ProviderResponseInvalid, match="dimension"):
        client.embed(["a"], purpose="t")


# -- embeddings speak HTTP themselves (no SDK): the same faults map onto the same errors -------


def _embedder(make_client, **kw):
    return make_client(role="embedding", capabilities=("embeddings",), **kw)


def test_embeddings_retry_a_429_after_its_wait_then_succeed(make_client, server: FakeOpenAI) -> None:
    server.enqueue(fake.rate_limited(retry_after_s=0.2), fake.Reply())
    start = time.monotonic()
    assert len(_embedder(make_client).embed(["a"], purpose="t").vectors) == 1
    assert time.monotonic() - start >= 0.2
    assert len(server.calls("/embeddings")) == 2


def test_embeddings_persistent_500_fails_after_max_retries(make_client, server: FakeOpenAI) -> None:
    server.enqueue(*[fake.server_error(500)] * 3)
    with pytest.raises(ProviderError) as info:
        _embedder(make_client, max_retries=1, backoff_base_s=0.01).embed(["a"], purpose="t")
    assert type(info.value) is ProviderError
    assert "HTTP 500" in str(info.value) and "2 attempt" in str(info.value)
    assert len(server.calls("/embeddings")) == 2


def test_embeddings_client_error_names_the_servers_message_and_is_not_retried(make_client, server) -> None:
    server.enqueue(fake.Reply(status=400, body={"error": {"message": "input too long"}}))
    with pytest.raises(ProviderError) as info:
        _embedder(make_client).embed(["a"], purpose="t")
    assert "HTTP 400" in str(info.value) and "input too long" in str(info.value)
    assert len(server.calls("/embeddings")) == 1


def test_embeddings_timeout_raises_provider_timeout(make_client, server: FakeOpenAI) -> None:
    server.enqueue(fake.slow(5), fake.slow(5))
    start = time.monotonic()
    with pytest.raises(ProviderTimeout):
        _embedder(make_client, timeout_s=0.3, max_retries=1).embed(["a"], purpose="t")
    assert 0.6 <= time.monotonic() - start < 3
    assert len(server.calls("/embeddings")) == 2


def test_embeddings_connection_refused_is_a_provider_error(make_client) -> None:
    with FakeOpenAI() as gone:
        url = gone.base_url
    with pytest.raises(ProviderError) as info:
        _embedder(make_client, endpoint=url, max_retries=0).embed(["a"], purpose="t")
    assert "connection failed" in str(info.value)


@pytest.mark.parametrize("reply", [fake.invalid_json(), fake.wrong_shape()], ids=["invalid", "shape"])
def test_broken_embeddings_bodies_raise_response_invalid(make_client, server: FakeOpenAI, reply) -> None:
    server.enqueue(reply)
    with pytest.raises(ProviderResponseInvalid):
        _embedder(make_client).embed(["a"], purpose="t")
    assert len(server.calls("/embeddings")) == 1


def test_embeddings_never_import_the_sdk(make_client, server: FakeOpenAI) -> None:
    """A process that only embeds (a one-off `rag query`) does not pay for importing the SDK."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from rag_engine.providers.openai_backend import OpenAIBackend\n"
        "assert 'openai' not in sys.modules, 'the backend module imported the SDK'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    server.enqueue(fake.Reply())
    client = _embedder(make_client)
    assert client.embed(["a"], purpose="t").vectors and client._backend._sdk_client is None
    client.preload()  # what `rag serve`'s warm-up calls: the SDK loaded before the first request
    assert client._backend._sdk_client is not None


# -- construction ---------------------------------------------------------------------


def test_missing_credential_names_the_variable(make_client) -> None:
    with pytest.raises(MissingCredential, match="RAG_TEST_PROVIDER_KEY"):
        make_client(env={})


def test_keyless_local_server_never_receives_the_ambient_openai_key(
    make_client, server: FakeOpenAI, monkeypatch, sentinel_key: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", sentinel_key)  # the SDK would pick this up if we let it
    make_client(kind="openai_compatible", credential_env=None, env={}).generate(Q, purpose="t")
    assert sentinel_key not in server.calls()[0].headers.get("authorization", "")
