"""Versioned model pricing and exact cost arithmetic.

Prices are Decimal end to end: a ledger that sums thousands of sub-cent calls must add up to
the invoice, which floats do not. Every cost carries the pricing ``version`` it was computed
with; a new price means a new version, and old usage records are never re-priced.

Models on our own machine are priced by their provider's ``local_cost`` (machine time, its own
version; ``rag_engine.config.LocalCostConfig``) instead of this file, unless they name a
``pricing_ref``.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rag_engine import yaml_safe
from rag_engine.config import EngineConfig, LocalCostConfig, ModelConfig, ProviderConfig, under_root
from rag_engine.errors import ConfigError

_MILLION = Decimal(1_000_000)


def local_cost_for(provider: ProviderConfig, model: ModelConfig) -> LocalCostConfig | None:
    """The machine-time rate a model's calls are priced at: its provider's ``local_cost``, unless
    the model names a ``pricing_ref`` (then the pricing file prices it, as any hosted model)."""
    return provider.local_cost if model.pricing_ref is None else None


def local_compute(provider: ProviderConfig, model: ModelConfig) -> bool:
    """Embeddings from a provider that is not hosted and has no ``local_cost`` run on our own cores
    at no recorded cost: every call costs 0, answered or failed, whatever the pricing file holds.
    (Generation on a local server is not assumed free: without a ``local_cost`` its cost model is
    the pricing file's.)"""
    return (
        model.role == "embedding"
        and not provider.hosted
        and provider.kind != "replay"
        and local_cost_for(provider, model) is None
    )


def _exact_decimal(value: Any) -> Any:
    """YAML may hand us a float (unquoted 0.15); go through its shortest repr, not its binary value."""
    if isinstance(value, float):
        return Decimal(repr(value))
    return value


class ModelPrice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_million: Decimal = Field(ge=0)
    cached_input_per_million: Decimal | None = Field(None, ge=0)
    output_per_million: Decimal = Field(ge=0)

    _exact = field_validator("input_per_million", "cached_input_per_million", "output_per_million", mode="before")(
        _exact_decimal
    )


class PriceTable(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = Field(min_length=1)
    currency: str = "USD"
    models: dict[str, ModelPrice] = {}

    def price(
        self,
        pricing_ref: str | None,
        input_tokens: int,
        cached_input_tokens: int | None,
        output_tokens: int,
    ) -> Decimal | None:
        """Cost of one call, or None when the model has no price (unknown, not free).

        ``input_tokens`` includes the cached ones (as OpenAI reports ``prompt_tokens``); cached
        tokens are billed at the cached rate and the rest at the full rate. ``None`` cached means
        the provider did not report caching, so all input is billed at the full rate. Reasoning
        tokens are already part of ``output_tokens`` and are not billed twice.
        """
        if pricing_ref is None or pricing_ref not in self.models:
            return None
        p = self.models[pricing_ref]
        cached = min(max(cached_input_tokens or 0, 0), input_tokens)
        cached_rate = p.input_per_million if p.cached_input_per_million is None else p.cached_input_per_million
        total = (
            (input_tokens - cached) * p.input_per_million + cached * cached_rate + output_tokens * p.output_per_million
        )
        return total / _MILLION


_FLAT_META = ("version", "currency")


def _flat_shape(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """The seed's shape, accepted as written: top-level ``provider/model`` keys, each with
    ``input_per_million``, ``cached_input_per_million`` and ``output_per_million``. Its version is
    the ``version`` key when present, else the file's content hash (a price edit is a new version)."""
    import hashlib

    version = data.get("version") or "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    models = {k: v for k, v in data.items() if k not in _FLAT_META}
    return {"version": version, "currency": data.get("currency", "USD"), "models": models}


def price_key(pricing_ref: str | None, provider: str, served_model: str) -> str:
    """The key a model is priced under: its ``pricing_ref`` when set, else ``provider/served_model``
    (the seed's flat shape names models that way)."""
    return pricing_ref or f"{provider}/{served_model}"


def load_pricing(path: str | Path) -> PriceTable:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"pricing file not found: {path}")
    try:
        data = yaml_safe.load_file(path)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    if "version" in data and not isinstance(data["version"], str):
        data["version"] = str(data["version"])  # an unquoted date or number is still a version label
    if "models" not in data and any(isinstance(v, dict) for v in data.values()):
        data = _flat_shape(data, path)
    try:
        return PriceTable.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}: invalid pricing: {exc}") from None


def pricing_for(cfg: EngineConfig, root: str | Path) -> PriceTable:
    """The pricing table named by ``cfg.pricing_file``, relative to the project root."""
    return load_pricing(under_root(root, cfg.pricing_file))
