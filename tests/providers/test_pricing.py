"""Cost arithmetic is exact Decimal; unknown pricing is None, never 0."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from rag_engine.errors import ConfigError
from rag_engine.providers.ledger import UsageLedger
from rag_engine.providers.pricing import PriceTable, load_pricing

ROOT = Path(__file__).resolve().parents[2]


def test_cached_input_is_billed_at_the_cached_rate_and_removed_from_full_rate(pricing: PriceTable) -> None:
    # 1000 prompt tokens of which 400 cached, 200 output, at 2.50 / 1.25 / 10.00 per million
    cost = pricing.price("priced-model", 1000, 400, 200)
    assert cost == Decimal("0.0015") + Decimal("0.0005") + Decimal("0.002")
    assert cost == Decimal("0.004")
    assert isinstance(cost, Decimal)


def test_cached_not_reported_bills_all_input_at_full_rate(pricing: PriceTable) -> None:
    assert pricing.price("priced-model", 1000, None, 0) == Decimal("0.0025")
    # zero cached is a reported zero and gives the same bill, but is a different fact
    assert pricing.price("priced-model", 1000, 0, 0) == Decimal("0.0025")


def test_sub_cent_sums_are_exact(pricing: PriceTable) -> None:
    one = pricing.price("priced-model", 1, 1, 1)  # 1.25e-6 + 1e-5
    total = sum((one for _ in range(1000)), Decimal(0))
    assert total == Decimal("0.01125")


def test_model_without_cached_rate_bills_cached_tokens_at_full_rate(pricing: PriceTable) -> None:
    assert pricing.price("embed-model", 1_000_000, 500_000, 0) == Decimal("0.02")


def test_unknown_pricing_is_none(pricing: PriceTable) -> None:
    assert pricing.price("no-such-model", 10, None, 10) is None
    assert pricing.price(None, 10, None, 10) is None


def test_cached_more_than_input_is_clamped(pricing: PriceTable) -> None:
    assert pricing.price("priced-model", 100, 500, 0) == Decimal("0.000125")


def test_unquoted_float_prices_keep_their_decimal_value(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("version: 2026-01-01\nmodels:\n  m: {input_per_million: 0.1, output_per_million: 0.3}\n")
    table = load_pricing(path)
    assert table.version == "2026-01-01"
    assert table.models["m"].input_per_million == Decimal("0.1")
    assert table.price("m", 3_000_000, None, 1_000_000) == Decimal("0.6")


def test_negative_or_unknown_fields_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text('version: "v"\nmodels:\n  m: {input_per_million: "-1", output_per_million: "0"}\n')
    with pytest.raises(ConfigError):
        load_pricing(path)
    path.write_text('version: "v"\nmodels:\n  m: {input_per_million: "1", output_per_million: "0", typo: 1}\n')
    with pytest.raises(ConfigError):
        load_pricing(path)
    with pytest.raises(ConfigError):
        load_pricing(tmp_path / "missing.yaml")


def test_project_pricing_file_loads_with_a_version() -> None:
    table = load_pricing(ROOT / "config" / "pricing.yaml")
    assert table.version
    assert all(isinstance(p.input_per_million, Decimal) for p in table.models.values())


def test_new_pricing_version_never_rewrites_old_records(
    make_client, ledger: UsageLedger, server, pricing_file: Path, key_env: str, sentinel_key: str, tmp_path: Path
) -> None:
    from rag_engine.providers.clients import build_client
    from rag_engine.providers.ratelimit import RateLimiter
    from tests.support.fake_openai import ok, usage

    client = make_client()
    server.enqueue(ok(usage=usage(1000, 0)))
    first = client.generate([{"role": "user", "content": "q"}], purpose="t").usage
    assert (first.pricing_version, first.cost) == ("test-v1", Decimal("0.0025"))

    pricing_file.write_text(pricing_file.read_text().replace('"test-v1"', '"test-v2"').replace('"2.50"', '"5.00"'))
    repriced = build_client(
        client.spec,
        ledger=ledger,
        pricing=load_pricing(pricing_file),
        env={key_env: sentinel_key},
        root=tmp_path,
        limiter=RateLimiter(),
    )
    server.enqueue(ok(usage=usage(1000, 0)))
    second = repriced.generate([{"role": "user", "content": "q"}], purpose="t").usage
    assert (second.pricing_version, second.cost) == ("test-v2", Decimal("0.005"))

    stored = {r.id: r for r in ledger.records()}
    assert (stored[first.id].pricing_version, stored[first.id].cost) == ("test-v1", Decimal("0.0025"))
    assert (stored[second.id].pricing_version, stored[second.id].cost) == ("test-v2", Decimal("0.005"))
