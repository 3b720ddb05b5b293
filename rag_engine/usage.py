"""The usage record of one model call: what the ledger stores and what a ``ProviderError`` carries.

Below both the error tree and the ledger, so neither imports the other; it imports nothing of the engine.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class UsageRecord(BaseModel):
    """One model call as the ledger stores it. ``None`` means "not reported" / "unknown", never 0."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int | None = None
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    run_id: str | None = None
    purpose: str
    provider: str
    requested_model: str
    reported_model: str | None = None
    input_tokens: int = Field(0, ge=0)
    cached_input_tokens: int | None = Field(None, ge=0)
    output_tokens: int = Field(0, ge=0)
    reasoning_tokens: int | None = Field(None, ge=0)
    latency_ms: int = Field(0, ge=0)
    status: Literal["ok", "error"] = "ok"
    error_type: str | None = None
    pricing_version: str | None = None
    cost: Decimal | None = None
