"""`rag costs` output, and the local hash embedder metered like any other model."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from rag_engine.config import DefaultsConfig, EngineConfig, LedgerConfig, ModelConfig, ProviderConfig, StorageConfig
from rag_engine.errors import CapabilityNotSupported
from rag_engine.ops.costs import costs_report
from rag_engine.providers.clients import build_client
from rag_engine.providers.ledger import UsageLedger
from rag_engine.providers.registry import ModelSpec
from rag_engine.usage import UsageRecord


def _cfg(default_url: str = "sqlite:///var/ledger.sqlite") -> EngineConfig:
    return EngineConfig(
        storage=StorageConfig(ledger=LedgerConfig(url_env="RAG_TEST_LEDGER_URL", default_url=default_url)),
        providers=(ProviderConfig(name="local_hash", kind="local_hash"),),
        models=(
            ModelConfig(
                name="hash",
                provider="local_hash",
                role="embedding",
                served_model="feature-hash-v1",
                dimension=32,
                capabilities=("embeddings",),
            ),
            ModelConfig(name="g", provider="local_hash", role="generation", served_model="g"),
        ),
        defaults=DefaultsConfig(generation_model="g", embedding_model="hash"),
    )


def _rec(**kw) -> UsageRecord:
    fields = {
        "purpose": "answer",
        "provider": "openai",
        "requested_model": "gpt",
        "input_tokens": 100,
        "output_tokens": 10,
    }
    fields.update(kw)
    return UsageRecord(**fields)


def test_costs_report_text_and_json(tmp_path: Path) -> None:
    env = {"RAG_TEST_LEDGER_URL": f"sqlite:///{tmp_path / 'l.sqlite'}"}
    led = UsageLedger(env["RAG_TEST_LEDGER_URL"])
    led.record(_rec(run_id="r1", cost=Decimal("0.0125")))
    led.record(_rec(run_id="r1", cost=Decimal("0.0000075")))
    led.record(_rec(run_id="r1", provider="local_llm", requested_model="qwen", cost=None))
    led.record(_rec(run_id="r2", cost=Decimal("1")))
    led.dispose()

    text = costs_report(_cfg(), tmp_path, env=env)
    assert "qwen" in text and "unknown" in text
    assert "total: 4 calls, 0 errors, cost 1.012508" in text
    assert "1 call(s) with unknown cost" in text

    data = json.loads(costs_report(_cfg(), tmp_path, run_id="r1", as_json=True, env=env))
    assert data["totals"] == {
        "calls": 3,
        "errors": 0,
        "cost": "0.0125075",
        "unknown_cost_calls": 1,
        "estimated_calls": 0,
    }
    by_provider = {row["provider"]: row for row in data["rows"]}
    assert by_provider["openai"]["cost"] == "0.0125075" and by_provider["openai"]["calls"] == 2
    assert by_provider["local_llm"]["cost"] is None and by_provider["local_llm"]["unknown_cost_calls"] == 1


def test_costs_priced_from_estimated_counts_say_estimated(tmp_path: Path) -> None:
    """A fixture's made-up counts (``estimated``): its row's cost and the total are marked, and a
    line says what the estimate is; a row of reported counts is not marked."""
    env = {"RAG_TEST_LEDGER_URL": f"sqlite:///{tmp_path / 'l.sqlite'}"}
    led = UsageLedger(env["RAG_TEST_LEDGER_URL"])
    led.record(
        _rec(provider="demo_replay", requested_model="fixture-demo-replay", cost=Decimal("0.001"), estimated=True)
    )
    led.record(_rec(cost=Decimal("0.002"), estimated=False))
    led.dispose()
    text = costs_report(_cfg(), tmp_path, env=env)
    fixture = next(line for line in text.splitlines() if "fixture-demo-replay" in line)
    reported = next(line for line in text.splitlines() if "│ openai" in line)
    assert "0.001000 (estimated)" in fixture and "(estimated)" not in reported
    assert "total: 2 calls, 0 errors, cost 0.003000 (partly estimated)" in text
    assert "1 call(s) priced from estimated token counts" in text
    data = json.loads(costs_report(_cfg(), tmp_path, as_json=True, env=env))
    assert data["totals"]["estimated_calls"] == 1
    assert {r["provider"]: r["estimated_calls"] for r in data["rows"]} == {"demo_replay": 1, "openai": 0}


def test_costs_report_on_an_empty_ledger(tmp_path: Path) -> None:
    assert costs_report(_cfg(), tmp_path, env={}) == "no usage recorded"
    assert (tmp_path / "var" / "ledger.sqlite").is_file()  # default URL resolved under the given root
    assert json.loads(costs_report(_cfg(), tmp_path, as_json=True, env={}))["rows"] == []


def test_local_hash_embeddings_are_metered_as_free(tmp_path: Path) -> None:
    cfg = _cfg()
    spec = ModelSpec(model=cfg.model("hash"), provider=cfg.provider("local_hash"))
    ledger = UsageLedger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    client = build_client(spec, ledger=ledger, env={}, root=tmp_path)
    result = client.embed(["data erasure request", "erasure of data"], purpose="index", run_id="r")
    assert len(result.vectors) == 2 and all(len(v) == 32 for v in result.vectors)
    assert result.vectors == client.embed(["data erasure request", "erasure of data"], purpose="index").vectors
    [rec, _] = ledger.records()
    assert (rec.provider, rec.requested_model, rec.status, rec.cost) == (
        "local_hash",
        "feature-hash-v1",
        "ok",
        Decimal(0),
    )
    with pytest.raises(CapabilityNotSupported):
        client.generate([{"role": "user", "content": "x"}], purpose="t")
    assert ledger.count() == 2


def test_client_from_config_uses_the_configured_ledger_and_pricing(tmp_path: Path) -> None:
    from rag_engine.providers.clients import client_from_config

    cfg = _cfg().model_copy(update={"pricing_file": "prices.yaml"})
    (tmp_path / "prices.yaml").write_text('version: "p-7"\nmodels: {}\n')
    env = {"RAG_TEST_LEDGER_URL": "sqlite:///state/usage.sqlite"}
    client = client_from_config(cfg, "hash", root=tmp_path, env=env)
    rec = client.embed(["x"], purpose="index").usage
    assert rec.pricing_version == "p-7" and rec.id is not None
    assert UsageLedger(f"sqlite:///{tmp_path / 'state' / 'usage.sqlite'}").count() == 1
