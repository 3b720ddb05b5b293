"""A sentinel API key goes over the wire and nowhere else: not the ledger, logs, errors or reports."""

from __future__ import annotations

import logging
import traceback
from pathlib import Path

import pytest
from pydantic import BaseModel

from rag_engine.config import DefaultsConfig, EngineConfig, LedgerConfig, ModelConfig, StorageConfig
from rag_engine.errors import ProviderError
from rag_engine.ops.costs import costs_report
from rag_engine.providers.ledger import UsageLedger
from tests.support import fake_openai as fake
from tests.support.fake_openai import FakeOpenAI

Q = [{"role": "user", "content": "hello"}]
LOGGERS = ("", "openai", "httpx", "httpx2", "httpcore", "httpcore2", "rag_engine")


class Answer(BaseModel):
    answer: str


def _chain(exc: BaseException | None) -> list[BaseException]:
    out = []
    while exc is not None:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def _every_fault() -> list:
    return [
        fake.ok(usage=fake.usage(10, 2, cached=5)),
        fake.rate_limited(retry_after_ms=10),
        fake.ok(),
        fake.server_error(500),
        fake.server_error(500),
        fake.server_error(500),
        fake.truncated(),
        fake.invalid_json(),
        fake.wrong_shape(),
        fake.echo_auth_error(),
        fake.slow(5),
        fake.slow(5),
        fake.slow(5),
    ]


def test_sentinel_key_is_sent_but_never_leaks(
    make_client, server: FakeOpenAI, ledger: UsageLedger, ledger_path: Path, caplog, sentinel_key: str, tmp_path: Path
) -> None:
    for name in LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)
    client = make_client(timeout_s=0.3, max_retries=2)
    server.enqueue(*_every_fault())
    # a 400 whose body repeats the raw key, as a misbehaving proxy might
    server.enqueue(fake.Reply(status=400, body={"error": {"message": f"key {sentinel_key} rejected"}}))

    errors: list[BaseException] = []
    for _ in range(10):
        try:
            client.generate(Q, purpose="secret-test", run_id="run-s")
        except ProviderError as exc:
            errors.append(exc)
    try:
        client.generate(Q, schema=Answer, purpose="secret-test")
    except ProviderError as exc:
        errors.append(exc)

    # The key really was presented to the server ...
    auth = {r.headers.get("authorization") for r in server.requests}
    assert auth == {f"Bearer {sentinel_key}"}
    assert len(errors) >= 6  # 500s, truncated, invalid, shape, 401, 400s, timeout

    # ... and appears in none of the places a key could leak to.
    for exc in errors:
        rendered = "".join(traceback.format_exception(exc))
        assert sentinel_key not in rendered and sentinel_key not in repr(exc)
        assert not any(type(e).__module__.startswith("openai") for e in _chain(exc))  # no request objects ride along
    assert sentinel_key not in repr(client)

    logged = caplog.text + "".join(f"{r.getMessage()}{r.args!r}" for r in caplog.records)
    assert any(r.name.startswith("openai") for r in caplog.records)  # the SDK's debug logs were captured
    assert any(r.name.startswith("httpcore") for r in caplog.records)  # and the transport's
    assert sentinel_key not in logged
    assert sentinel_key[-12:] not in logged  # not even a tail, as masked keys show

    assert ledger.count() == 11
    for path in ledger_path.parent.iterdir():  # main file, -wal and -shm
        assert sentinel_key.encode() not in path.read_bytes(), path.name

    cfg = EngineConfig(
        storage=StorageConfig(ledger=LedgerConfig(url_env="RAG_TEST_LEDGER_URL")),
        providers=(client.spec.provider,),
        models=(
            client.spec.model,
            ModelConfig(name="e", provider=client.spec.provider.name, role="embedding", served_model="e", dimension=8),
        ),
        defaults=DefaultsConfig(generation_model=client.spec.model.name, embedding_model="e"),
    )
    env = {"RAG_TEST_LEDGER_URL": f"sqlite:///{ledger_path}"}
    for as_json in (False, True):
        report = costs_report(cfg, tmp_path, as_json=as_json, env=env)
        assert "run-s" in report and sentinel_key not in report


def test_401_echoing_the_key_is_reported_by_env_name_only(make_client, server: FakeOpenAI, sentinel_key: str) -> None:
    server.enqueue(fake.echo_auth_error())
    with pytest.raises(ProviderError) as info:
        make_client().generate(Q, purpose="t")
    assert "RAG_TEST_PROVIDER_KEY" in str(info.value)
    assert sentinel_key not in str(info.value) and "SENTINEL" not in str(info.value)
    assert len(server.requests) == 1  # auth failures are not retried


def test_record_mode_cassette_holds_no_key(tmp_path: Path, server: FakeOpenAI, sentinel_key: str, key_env: str) -> None:
    from rag_engine.config import ProviderConfig
    from rag_engine.providers.clients import build_client
    from rag_engine.providers.registry import ModelSpec

    replay = ProviderConfig(name="rep", kind="replay", cassette="c.jsonl", record=True, record_provider="live")
    live = ProviderConfig(name="live", kind="openai", credential_env=key_env, endpoint=server.base_url, max_retries=0)
    model = ModelConfig(name="g", provider="rep", role="generation", served_model="m", capabilities=("generation",))
    cfg = EngineConfig(
        providers=(replay, live),
        models=(model, ModelConfig(name="e", provider="live", role="embedding", served_model="e", dimension=8)),
        defaults=DefaultsConfig(generation_model="g", embedding_model="e"),
    )
    client = build_client(ModelSpec(model, replay), env={key_env: sentinel_key}, root=tmp_path, config=cfg)
    client.generate(Q, purpose="t")
    assert server.requests[0].headers["authorization"] == f"Bearer {sentinel_key}"
    assert sentinel_key.encode() not in (tmp_path / "c.jsonl").read_bytes()
    assert sentinel_key not in repr(client)
