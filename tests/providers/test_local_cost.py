"""Local providers cost machine time: the ``local_cost`` config, its startup rejections, and the
cost and pricing version every call's usage record gets, through the real client and a loopback
OpenAI-compatible server."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from rag_engine.config import LocalCostConfig, load_config
from rag_engine.errors import ConfigError, ProviderTimeout
from rag_engine.providers.ledger import UsageLedger
from tests.conftest import ROOT
from tests.support.fake_openai import FakeOpenAI, Reply, ok, slow, usage

Q = [{"role": "user", "content": "q"}]
SECONDS = {"version": "machine-test-s", "usd_per_hour": "0.36"}  # 0.0001 USD per second
TOKENS = {"version": "machine-test-t", "usd_per_hour": "0.36", "tokens_per_second": 100}  # 1 USD per million


# -- the config: one rate in one of two forms, refused at startup when it is nonsense -------------


def test_seconds_and_token_forms_price_a_call() -> None:
    by_second = LocalCostConfig.model_validate(SECONDS)
    assert by_second.basis == "seconds" and by_second.per_million_tokens is None
    assert by_second.cost(latency_ms=2500, tokens=10_000) == Decimal("0.00025")  # tokens do not count
    by_token = LocalCostConfig.model_validate(TOKENS)
    assert by_token.basis == "tokens" and by_token.per_million_tokens == Decimal(1)
    assert by_token.cost(latency_ms=999_999, tokens=1500) == Decimal("0.0015")  # seconds do not count
    direct = LocalCostConfig.model_validate({"version": "v", "usd_per_million_tokens": 0.5})  # a YAML float
    assert direct.per_million_tokens == Decimal("0.5") and direct.cost(latency_ms=1, tokens=2) == Decimal("1E-6")
    # a derived rate has no exact decimal form: rounded to a trillionth of a dollar, the same every time
    third = LocalCostConfig.model_validate({"version": "v", "usd_per_hour": "0.10", "tokens_per_second": 60})
    assert third.cost(latency_ms=0, tokens=3100) == Decimal("0.001435185185")
    assert "0.10 USD/h at 60 tokens/s = 0.462963 USD per million tokens" in third.describe()


def _config_with(tmp_path: Path, provider_block: str) -> Path:
    """The project config with the local_embed provider's local_cost block replaced."""
    text = (ROOT / "config" / "engine.yaml").read_text(encoding="utf-8")
    start = text.index("    local_cost:", text.index("- name: local_embed"))
    end = text.index("  - name: local_hash")
    path = tmp_path / "engine.yaml"
    path.write_text(text[:start] + provider_block + text[end:], encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ('    local_cost: {version: v1, usd_per_hour: "-0.10"}\n', "greater than or equal to 0"),
        ("    local_cost: {version: v1, usd_per_hour: 0.1, tokens_per_second: 0}\n", "greater than 0"),
        (
            "    local_cost: {version: v1, usd_per_hour: 0.1, usd_per_million_tokens: 0.07}\n",
            "two forms of one rate: give one",
        ),
        ("    local_cost: {version: v1, tokens_per_second: 400}\n", "it needs usd_per_hour"),
        ("    local_cost: {version: v1}\n", "needs usd_per_hour (machine time) or usd_per_million_tokens"),
        ('    local_cost: {usd_per_hour: "0.10"}\n', "local_cost.version: Field required"),
        ('    local_cost: {version: v1, usd_per_hour: "0.10", per: call}\n', "unknown key"),
    ],
)
def test_nonsense_local_costs_are_refused_at_startup_with_their_line(tmp_path, block, message) -> None:
    path = _config_with(tmp_path, block)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert message in str(err.value)
    assert f"{path}:" in str(err.value)  # where: file and line


def test_a_hosted_provider_is_priced_by_the_pricing_file_never_by_local_cost(tmp_path) -> None:
    text = (ROOT / "config" / "engine.yaml").read_text(encoding="utf-8")
    anchor = "    credential_env: OPENAI_API_KEY\n"
    path = tmp_path / "engine.yaml"
    path.write_text(text.replace(anchor, anchor + '    local_cost: {version: v1, usd_per_hour: "0.10"}\n'), "utf-8")
    with pytest.raises(ConfigError, match="provider 'openai' is hosted: its models are priced by the pricing file"):
        load_config(path)


def test_the_shipped_config_prices_its_local_providers() -> None:
    cfg = load_config(ROOT / "config" / "engine.yaml")
    for name in ("local_embed", "demo_replay"):  # what the eval calls: per token, so load-independent
        provider = cfg.provider(name)
        assert provider is not None and provider.local_cost is not None and provider.local_cost.basis == "tokens"
    example = cfg.provider("local_llm")  # the documented example of the seconds form
    assert example is not None and example.local_cost is not None and example.local_cost.basis == "seconds"


# -- calls: the cost and the version on every usage record ----------------------------------------


def test_a_local_generation_call_costs_its_tokens_at_the_derived_rate(make_client, server: FakeOpenAI, ledger) -> None:
    server.enqueue(ok("hi", usage=usage(1000, 200)))
    client = make_client(kind="openai_compatible", credential_env=None, pricing_ref=None, local_cost=TOKENS)
    rec = client.generate(Q, purpose="answer").usage
    assert rec.cost == Decimal("0.0012") and rec.pricing_version == "machine-test-t"
    assert ledger.records()[-1].cost == Decimal("0.0012")  # as stored, exact


def test_a_local_embedder_with_a_rate_is_no_longer_free(make_client, server: FakeOpenAI) -> None:
    server.enqueue(ok(usage={"prompt_tokens": 500, "total_tokens": 500}))
    client = make_client(
        kind="openai_compatible",
        credential_env=None,
        pricing_ref=None,
        role="embedding",
        capabilities=("embeddings",),
        local_cost=TOKENS,
    )
    rec = client.embed(["a passage"], purpose="index").usage
    assert rec.cost == Decimal("0.0005") and rec.pricing_version == "machine-test-t"


def test_priced_by_the_second_a_call_costs_its_measured_time_failed_or_not(make_client, server: FakeOpenAI) -> None:
    server.enqueue(slow(0.3))
    client = make_client(kind="openai_compatible", credential_env=None, pricing_ref=None, local_cost=SECONDS)
    rec = client.generate(Q, purpose="answer").usage
    assert rec.latency_ms >= 300 and rec.pricing_version == "machine-test-s"
    assert rec.cost == Decimal("0.36") * rec.latency_ms / 3_600_000
    server.enqueue(slow(5), slow(5), slow(5))  # longer than the 2 s timeout, every retry
    with pytest.raises(ProviderTimeout) as err:
        client.generate(Q, purpose="answer")
    failed = err.value.usage
    assert failed is not None and failed.status == "error" and failed.latency_ms >= 2000
    assert failed.cost == Decimal("0.36") * failed.latency_ms / 3_600_000  # the machine was held


def test_without_reported_tokens_a_per_token_cost_is_unknown(make_client, server: FakeOpenAI) -> None:
    no_usage = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "fake-model-0001",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    }
    server.enqueue(Reply(body=no_usage))  # a server that reports no usage block
    client = make_client(kind="openai_compatible", credential_env=None, pricing_ref=None, local_cost=TOKENS)
    rec = client.generate(Q, purpose="answer").usage
    assert rec.cost is None and rec.pricing_version == "machine-test-t"  # unknown, never 0


def test_a_pricing_ref_wins_over_the_providers_local_cost(make_client, server: FakeOpenAI) -> None:
    server.enqueue(ok("hi", usage=usage(1000, 0)))
    client = make_client(kind="openai_compatible", credential_env=None, local_cost=TOKENS)  # priced-model
    rec = client.generate(Q, purpose="answer").usage
    assert rec.cost == Decimal("0.0025") and rec.pricing_version == "test-v1"


def test_the_replay_provider_is_priced_as_machine_time_per_recorded_token(tmp_path: Path) -> None:
    from rag_engine.providers.clients import client_from_config
    from rag_engine.providers.replay import Cassette
    from rag_engine.providers.results import TokenUsage

    cfg = load_config(ROOT / "config" / "engine.yaml")
    replay = cfg.provider("demo_replay")
    assert replay is not None and replay.local_cost is not None
    cassette = tmp_path / "c.jsonl"
    demo = cfg.model("demo-chat")
    assert demo is not None and demo.served_model == "fixture-demo-replay"  # a fixture's name, not a hosted model's
    Cassette(cassette).put_generation(
        demo.served_model,
        Q,
        "recorded",
        usage=TokenUsage.from_characters(12000, 400),  # a fixture's characters / 4
    )
    providers = tuple(p.model_copy(update={"cassette": str(cassette)}) if p is replay else p for p in cfg.providers)
    cfg = cfg.model_copy(update={"providers": providers})
    ledger = UsageLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    try:
        rec = client_from_config(cfg, "demo-chat", root=ROOT, env={}, ledger=ledger).generate(Q, purpose="answer").usage
    finally:
        ledger.dispose()
    assert rec.pricing_version == replay.local_cost.version
    assert rec.cost == replay.local_cost.cost(latency_ms=0, tokens=3100)  # never the lookup's milliseconds
    assert rec.estimated is True  # priced from counts no provider reported: an estimate, and said so
    assert replay.local_cost.fixture and replay.local_cost.label.startswith("fixture machine")
