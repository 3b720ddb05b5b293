"""Fixtures for the provider layer: a loopback OpenAI server, a ledger file, a pricing table.

Everything runs against real components (HTTP through the openai SDK, SQLite through
SQLAlchemy); nothing of ours is mocked. The API key used is a sentinel value that the secret
tests search for in every place a key could leak to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rag_engine.config import ModelConfig, ProviderConfig
from rag_engine.providers.clients import ModelClient, build_client
from rag_engine.providers.ledger import UsageLedger
from rag_engine.providers.pricing import PriceTable, load_pricing
from rag_engine.providers.ratelimit import RateLimiter
from rag_engine.providers.registry import ModelSpec
from tests.support.fake_openai import FakeOpenAI

SENTINEL_KEY = "sk-SENTINEL-DO-NOT-LEAK-7f3a9c1e5b2d4f60"
KEY_ENV = "RAG_TEST_PROVIDER_KEY"

PRICING_YAML = """\
version: "test-v1"
currency: USD
models:
  priced-model:
    input_per_million: "2.50"
    cached_input_per_million: "1.25"
    output_per_million: "10.00"
  embed-model:
    input_per_million: "0.02"
    output_per_million: "0"
"""


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger" / "usage.sqlite"


@pytest.fixture
def ledger(ledger_path: Path) -> Iterator[UsageLedger]:
    ledger_path.parent.mkdir(parents=True, exist_ok=True)
    led = UsageLedger(f"sqlite:///{ledger_path}")
    yield led
    led.dispose()


@pytest.fixture
def pricing_file(tmp_path: Path) -> Path:
    path = tmp_path / "pricing.yaml"
    path.write_text(PRICING_YAML, encoding="utf-8")
    return path


@pytest.fixture
def pricing(pricing_file: Path) -> PriceTable:
    return load_pricing(pricing_file)


def _make_spec(
    *,
    kind: str = "openai",
    endpoint: str | None = None,
    role: str = "generation",
    served_model: str = "served-model-1",
    capabilities: tuple[str, ...] = ("generation", "structured_output"),
    pricing_ref: str | None = "priced-model",
    credential_env: str | None = KEY_ENV,
    dimension: int | None = None,
    **provider_overrides: Any,
) -> ModelSpec:
    provider_fields: dict[str, Any] = {
        "name": f"test_{kind}",
        "kind": kind,
        "hosted": kind == "openai",
        "credential_env": credential_env,
        "endpoint": endpoint,
        "timeout_s": 2.0,
        "max_retries": 2,
        "backoff_base_s": 0.01,
    }
    provider_fields.update(provider_overrides)
    provider = ProviderConfig(**provider_fields)
    model = ModelConfig(
        name="test-model",
        provider=provider.name,
        role=role,
        served_model=served_model,
        capabilities=capabilities,
        pricing_ref=pricing_ref,
        dimension=dimension if dimension is not None else (8 if role == "embedding" else None),
    )
    return ModelSpec(model=model, provider=provider)


@pytest.fixture
def make_spec() -> Callable[..., ModelSpec]:
    """Factory for a ModelSpec (provider + model config) with test defaults."""
    return _make_spec


@pytest.fixture
def sentinel_key() -> str:
    return SENTINEL_KEY


@pytest.fixture
def key_env() -> str:
    return KEY_ENV


@pytest.fixture
def make_client(
    server: FakeOpenAI, ledger: UsageLedger, pricing: PriceTable, tmp_path: Path
) -> Callable[..., ModelClient]:
    """Build a real client against the loopback server; keyword args go to ``make_spec``."""

    def _make(
        *, env: dict[str, str] | None = None, limiter: RateLimiter | None = None, **spec_kwargs: Any
    ) -> ModelClient:
        spec_kwargs.setdefault("endpoint", server.base_url)
        spec = _make_spec(**spec_kwargs)
        return build_client(
            spec,
            ledger=ledger,
            pricing=pricing,
            env={KEY_ENV: SENTINEL_KEY} if env is None else env,
            root=tmp_path,
            limiter=limiter or RateLimiter(),
        )

    return _make
