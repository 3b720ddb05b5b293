"""Structured output in the form each server accepts, through the real SDK over loopback HTTP.

One test per form (``ProviderConfig.structured_output_form``) checks what goes on the wire; a
server that refuses OpenAI's form the way llama-cpp-python's does (HTTP 422 unless the type is
``text`` or ``json_object``) is answered by declaring ``json_object_schema``. Constrained output
that still comes back unusable (cut at max_tokens inside a string, raw control characters in a
string) fails validation like any bad output, and the answer and the query expansion degrade.
The same forms against the real local server: tests/real_model.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from rag_engine.config import ModelConfig, ProviderConfig
from rag_engine.errors import ProviderError, ProviderResponseInvalid
from rag_engine.providers.clients import ModelClient, build_client
from rag_engine.providers.ledger import UsageLedger
from rag_engine.providers.ratelimit import RateLimiter
from rag_engine.providers.registry import ModelSpec
from rag_engine.retrieval.context import assemble_context
from rag_engine.retrieval.local_inference import expand_query
from tests.support.fake_openai import FakeOpenAI, Reply, ok, usage

CAPS = ("generation", "structured_output", "query_expansion")


class Person(BaseModel):
    name: str
    age: int


@pytest.fixture
def make_client(server: FakeOpenAI, tmp_path: Path) -> Iterator[Callable[..., ModelClient]]:
    ledger = UsageLedger(f"sqlite:///{tmp_path / 'usage.sqlite'}")

    def _make(form: str | None) -> ModelClient:
        provider = ProviderConfig(
            name="local_llm",
            kind="openai_compatible",
            endpoint=server.base_url,
            timeout_s=2.0,
            max_retries=0,
            structured_output_form=form,  # type: ignore[arg-type]
        )
        model = ModelConfig(name="m", provider="local_llm", role="generation", served_model="m-1", capabilities=CAPS)
        return build_client(
            ModelSpec(model=model, provider=provider), ledger=ledger, env={}, root=tmp_path, limiter=RateLimiter()
        )

    yield _make
    ledger.dispose()


def _ask(client: ModelClient, *, max_tokens: int | None = None) -> Person:
    result = client.generate(
        [{"role": "user", "content": "a person"}], schema=Person, purpose="test", max_tokens=max_tokens
    )
    assert isinstance(result.parsed, Person)
    return result.parsed


def _schema_names_fields(schema: dict[str, Any]) -> None:
    assert schema["type"] == "object" and set(schema["properties"]) == {"name", "age"}


# -- one test per form: what goes on the wire --------------------------------------------------


def test_default_is_openais_json_schema(server, make_client) -> None:
    server.enqueue(ok('{"name": "Ada", "age": 36}'))
    assert _ask(make_client(None)) == Person(name="Ada", age=36)
    body = server.calls("/chat/completions")[0].body
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["name"] == "Person"
    _schema_names_fields(body["response_format"]["json_schema"]["schema"])


def test_json_object_with_schema(server, make_client) -> None:
    server.enqueue(ok('{"name": "Ada", "age": 36}'))
    _ask(make_client("json_object_schema"))
    body = server.calls("/chat/completions")[0].body
    assert set(body["response_format"]) == {"type", "schema"} and body["response_format"]["type"] == "json_object"
    _schema_names_fields(body["response_format"]["schema"])


def test_json_object_without_schema_still_checks_the_schema_here(server, make_client) -> None:
    server.enqueue(ok('{"name": "Ada", "age": 36}'), ok('{"name": "Ada"}'))
    client = make_client("json_object")
    _ask(client)
    assert server.calls("/chat/completions")[0].body["response_format"] == {"type": "json_object"}
    with pytest.raises(ProviderResponseInvalid, match="does not match schema Person"):
        _ask(client)  # valid JSON, not the schema: the server was not told it, we check it


def test_vllm_structured_outputs_body_field(server, make_client) -> None:
    server.enqueue(ok('{"name": "Ada", "age": 36}'))
    _ask(make_client("structured_outputs"))
    body = server.calls("/chat/completions")[0].body
    assert "response_format" not in body
    _schema_names_fields(body["structured_outputs"]["json"])


# -- a server that refuses OpenAI's form (llama-cpp-python's: 422) ------------------------------


def _like_llama_cpp_python(body: Any) -> Reply:
    kind = (body.get("response_format") or {}).get("type", "text")
    if kind not in ("text", "json_object"):
        msg = "Input should be 'text' or 'json_object'"
        detail = [{"type": "literal_error", "loc": ["body", "response_format", "type"], "msg": msg}]
        return Reply(status=422, body={"detail": detail})
    return ok('{"name": "Ada", "age": 36}', usage=usage(12, 9))


def test_json_schema_refused_with_422_fails_once_without_retry(server, make_client, tmp_path) -> None:
    server.responder = _like_llama_cpp_python
    with pytest.raises(ProviderError, match="HTTP 422") as err:
        _ask(make_client("json_schema"))
    assert len(server.calls("/chat/completions")) == 1  # a 422 is not retried
    assert err.value.usage is not None and err.value.usage.status == "error"


def test_declaring_json_object_schema_is_accepted(server, make_client) -> None:
    server.responder = _like_llama_cpp_python
    client = make_client("json_object_schema")
    result = client.generate([{"role": "user", "content": "a person"}], schema=Person, purpose="test")
    assert result.parsed == Person(name="Ada", age=36)
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.status) == (12, 9, "ok")


# -- constrained output that is still unusable ------------------------------------------------

CUT_AT_MAX_TOKENS = '{"name": "Ada Lovel'
CONTROL_CHARACTER = '{"name": "Ada\x01Lovelace", "age": 36}'


@pytest.mark.parametrize("content", [CUT_AT_MAX_TOKENS, CONTROL_CHARACTER], ids=["cut", "control_char"])
def test_invalid_constrained_output_is_invalid_and_metered(server, make_client, content) -> None:
    server.enqueue(ok(content, usage=usage(20, 8)))
    with pytest.raises(ProviderResponseInvalid) as err:
        _ask(make_client("json_object_schema"), max_tokens=8)
    record = err.value.usage
    assert record is not None and record.status == "error" and record.error_type == "ProviderResponseInvalid"
    assert (record.input_tokens, record.output_tokens) == (20, 8)  # billed tokens of a bad answer still count


@pytest.mark.parametrize("content", [CUT_AT_MAX_TOKENS.replace("name", "queries"), '{"queries": ["a\x02b"]}'])
def test_bad_expansion_degrades_to_the_original_query(server, make_client, content) -> None:
    server.enqueue(ok(content))
    events: list[dict[str, Any]] = []
    assert expand_query(make_client("json_object_schema"), "notice period", events=events) == "notice period"
    assert events[0]["event"] == "local_inference_degraded" and events[0]["error_type"] == "ProviderResponseInvalid"


def test_bad_answer_degrades_to_the_extractive_answer(server, make_client) -> None:
    from rag_engine.config import ContextBudgetsConfig
    from rag_engine.retrieval.answer import answer_question
    from rag_engine.retrieval.candidates import Candidate

    chunk = Candidate(
        chunk_id="c1",
        anchor="c1",
        doc_id="d",
        heading="Art. 33",
        text="The controller shall notify the breach within 72 hours. Later text.",
        collection="public",
        score=1.0,
        sources=("lexical",),
    )
    context = assemble_context([chunk], budgets=ContextBudgetsConfig(), system_prompt="s", conversation=())
    server.enqueue(ok(json.dumps({"answer": "x"})[:9]))  # cut inside a string
    answer = answer_question(make_client("json_object_schema"), "breach notice?", context)
    assert answer.method == "extractive" and answer.error_type == "ProviderResponseInvalid"
    assert answer.citations == ("c1",)
