"""Replay provider: cassette hits, typed misses, record mode against the loopback server."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from pydantic import BaseModel

from rag_engine.config import DefaultsConfig, EngineConfig, ModelConfig, ProviderConfig
from rag_engine.errors import CapabilityNotSupported, ConfigError, ProviderResponseInvalid, ReplayMiss
from rag_engine.providers.clients import build_client
from rag_engine.providers.ledger import UsageLedger
from rag_engine.providers.pricing import PriceTable
from rag_engine.providers.registry import ModelSpec
from rag_engine.providers.replay import Cassette, embedding_key, generation_key
from rag_engine.providers.results import TokenUsage
from tests.support import fake_openai as fake
from tests.support.fake_openai import FakeOpenAI

Q = [
    {"role": "system", "content": "Answer from context."},
    {"role": "user", "content": "Customer 4711 asks about fees"},
]


class Answer(BaseModel):
    answer: str


def _replay_spec(
    cassette: str, *, record: bool = False, capabilities=("generation", "structured_output", "embeddings")
) -> ModelSpec:
    provider = ProviderConfig(
        name="demo_replay", kind="replay", cassette=cassette, record=record, record_provider="live" if record else None
    )
    model = ModelConfig(
        name="demo-chat",
        provider="demo_replay",
        role="generation",
        served_model="served-model-1",
        capabilities=capabilities,
        pricing_ref="priced-model",
    )
    return ModelSpec(model=model, provider=provider)


def _engine_config(spec: ModelSpec, live_endpoint: str, key_env: str) -> EngineConfig:
    live = ProviderConfig(
        name="live",
        kind="openai",
        hosted=True,
        credential_env=key_env,
        endpoint=live_endpoint,
        timeout_s=2,
        max_retries=0,
    )
    return EngineConfig(
        providers=(spec.provider, live),
        models=(spec.model, ModelConfig(name="e", provider="live", role="embedding", served_model="e", dimension=8)),
        defaults=DefaultsConfig(generation_model="demo-chat", embedding_model="e"),
    )


def test_replay_hit_answers_without_network_and_writes_usage(
    tmp_path: Path, ledger: UsageLedger, pricing: PriceTable
) -> None:
    cassette = Cassette(tmp_path / "c.jsonl")
    cassette.put_generation(
        "served-model-1",
        Q,
        '{"answer": "no fees"}',
        schema=Answer,
        reported_model="served-model-1-2026",
        usage=TokenUsage(input_tokens=1000, cached_input_tokens=0, output_tokens=100, reported=True),
    )
    client = build_client(_replay_spec("c.jsonl"), ledger=ledger, pricing=pricing, env={}, root=tmp_path)
    result = client.generate(Q, schema=Answer, purpose="answer", run_id="r1")
    assert result.parsed == Answer(answer="no fees")
    [rec] = ledger.records()
    assert (rec.provider, rec.status, rec.purpose, rec.run_id) == ("demo_replay", "ok", "answer", "r1")
    assert (rec.input_tokens, rec.cached_input_tokens, rec.output_tokens) == (1000, 0, 100)
    assert rec.reported_model == "served-model-1-2026"
    assert rec.cost == Decimal("0.0035")  # what the call would cost live


def test_estimated_counts_are_priced_and_marked_estimated_never_reported(
    tmp_path: Path, ledger: UsageLedger, pricing: PriceTable
) -> None:
    """A fixture's made-up counts (characters / 4) say so in the cassette (``reported: false``) and the
    ledger (``estimated``); the cost priced from them is kept, as an estimate."""
    assert TokenUsage().reported is False  # nothing is "reported" unless a provider said so
    with pytest.raises(ValueError, match="either reported"):
        TokenUsage(input_tokens=1, reported=True, estimate="characters / 4")
    cassette = Cassette(tmp_path / "c.jsonl")
    usage = TokenUsage.from_characters(4000, 400, 0)
    cassette.put_generation("served-model-1", Q, '{"answer": "no fees"}', schema=Answer, usage=usage)
    [line] = (tmp_path / "c.jsonl").read_text().splitlines()
    entry = json.loads(line)["usage"]
    assert entry["reported"] is False and entry["estimate"] == "characters / 4"
    assert (entry["input_tokens"], entry["output_tokens"]) == (1000, 100)
    client = build_client(_replay_spec("c.jsonl"), ledger=ledger, pricing=pricing, env={}, root=tmp_path)
    client.generate(Q, schema=Answer, purpose="answer", run_id="r1")
    [rec] = ledger.records()
    assert rec.estimated is True and rec.cost == Decimal("0.0035")  # the same price, marked estimated


def test_replay_miss_names_the_hash_not_the_prompt(tmp_path: Path, ledger: UsageLedger) -> None:
    client = build_client(_replay_spec("missing.jsonl"), ledger=ledger, env={}, root=tmp_path)
    with pytest.raises(ReplayMiss) as info:
        client.generate(Q, purpose="t")
    key = generation_key("served-model-1", Q, None)
    assert key in str(info.value)
    assert "4711" not in str(info.value) and "fees" not in str(info.value)
    assert ledger.records()[0].error_type == "ReplayMiss"
    assert ledger.records()[0].cost == 0  # nothing ran: known to cost nothing, not unknown


def test_key_depends_on_messages_model_and_schema() -> None:
    base = generation_key("m", Q, None)
    assert base == generation_key("m", [dict(m) for m in Q], None)  # canonical, not identity-based
    assert base != generation_key("m2", Q, None)
    assert base != generation_key("m", Q[:1], None)
    assert base != generation_key("m", Q, Answer)
    assert embedding_key("m", ["a"]) != embedding_key("m", ["b"]) != base


def test_capability_is_checked_before_the_cassette(tmp_path: Path) -> None:
    client = build_client(_replay_spec("c.jsonl", capabilities=("generation",)), env={}, root=tmp_path)
    with pytest.raises(CapabilityNotSupported):
        client.generate(Q, schema=Answer, purpose="t")  # would otherwise be a ReplayMiss


def test_record_mode_forwards_misses_and_appends_then_replays_offline(
    tmp_path: Path, server: FakeOpenAI, ledger: UsageLedger, pricing: PriceTable, key_env: str, sentinel_key: str
) -> None:
    spec = _replay_spec("cassettes/demo.jsonl", record=True)
    cfg = _engine_config(spec, server.base_url, key_env)
    recorder = build_client(
        spec, ledger=ledger, pricing=pricing, env={key_env: sentinel_key}, root=tmp_path, config=cfg
    )

    server.enqueue(
        fake.ok('{"answer": "recorded"}', model="served-model-1-live", usage=fake.usage(300, 20, cached=100))
    )
    first = recorder.generate(Q, schema=Answer, purpose="answer")
    second = recorder.generate(Q, schema=Answer, purpose="answer")  # now a hit: no second request
    assert first.parsed == second.parsed == Answer(answer="recorded")
    assert len(server.calls("/chat/completions")) == 1
    vectors = recorder.embed(["a", "b"], purpose="index").vectors
    assert len(server.calls("/embeddings")) == 1

    lines = [json.loads(line) for line in (tmp_path / "cassettes" / "demo.jsonl").read_text().splitlines()]
    assert [e["operation"] for e in lines] == ["chat.completions", "embeddings"]
    chat = lines[0]
    assert chat["fixture"] is True and chat["source"] == "recorded:live"
    assert chat["response"] == {"text": '{"answer": "recorded"}', "parsed": {"answer": "recorded"}}
    assert chat["reported_model"] == "served-model-1-live"
    assert (chat["usage"]["input_tokens"], chat["usage"]["cached_input_tokens"]) == (300, 100)
    assert chat["key"] == generation_key("served-model-1", Q, Answer)
    assert "4711" not in json.dumps(chat)  # the prompt itself is not stored
    assert lines[1]["response"]["vectors"] == vectors

    live_rec, replay_rec = ledger.records()[:2]
    assert live_rec.provider == "live" and replay_rec.provider == "demo_replay"
    assert (replay_rec.input_tokens, replay_rec.cached_input_tokens, replay_rec.output_tokens) == (300, 100, 20)
    assert live_rec.cost == replay_rec.cost == Decimal("0.000825")  # (200*2.5 + 100*1.25 + 20*10) / 1e6

    # A fresh replay-only client, with the server gone, answers from the file.
    server.requests.clear()
    player = build_client(_replay_spec("cassettes/demo.jsonl"), ledger=ledger, env={}, root=tmp_path)
    assert player.generate(Q, schema=Answer, purpose="answer").parsed == Answer(answer="recorded")
    assert player.embed(["a", "b"], purpose="index").vectors == vectors
    assert server.requests == []


def test_record_mode_needs_a_live_record_provider(tmp_path: Path) -> None:
    spec = _replay_spec("c.jsonl", record=True)
    with pytest.raises(ConfigError, match="config"):
        build_client(spec, env={}, root=tmp_path)


def test_embeddings_replay(tmp_path: Path, ledger: UsageLedger) -> None:
    Cassette(tmp_path / "c.jsonl").put_embedding(
        "served-model-1", ["x"], [[0.5, 0.25]], usage=TokenUsage(input_tokens=3)
    )
    client = build_client(_replay_spec("c.jsonl"), ledger=ledger, env={}, root=tmp_path)
    assert client.embed(["x"], purpose="q").vectors == [[0.5, 0.25]]
    assert ledger.records()[0].input_tokens == 3
    with pytest.raises(ReplayMiss):
        client.embed(["y"], purpose="q")


def test_handwritten_entry_without_usage_has_unknown_cost(tmp_path: Path, pricing: PriceTable) -> None:
    Cassette(tmp_path / "c.jsonl").put_generation("served-model-1", Q, "plain answer")
    client = build_client(_replay_spec("c.jsonl"), pricing=pricing, env={}, root=tmp_path)
    rec = client.generate(Q, purpose="t").usage
    assert rec.status == "ok" and rec.cost is None


def test_corrupt_cassette_line_is_reported_by_number(tmp_path: Path) -> None:
    (tmp_path / "c.jsonl").write_text('{"key": "a"}\nnot json\n')
    with pytest.raises(ProviderResponseInvalid, match="line 2"):
        build_client(_replay_spec("c.jsonl"), env={}, root=tmp_path)
