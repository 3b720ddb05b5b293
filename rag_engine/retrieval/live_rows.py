"""What the live leg (``live_source``) hands on: its rows' provenance and the leg's result, without
the SQL that reads them (``live_query``), so the modules that carry live rows import no SQLAlchemy."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class LiveProvenance(BaseModel):
    """Where a live candidate came from and how fresh its source was when it was read."""

    model_config = ConfigDict(frozen=True)

    source: str
    table: str
    key: str
    committed_at: datetime
    retrieved_at: datetime
    stale: bool = False
    """The source's lag exceeded its freshness window when this row was read."""


class LiveLeg(BaseModel):
    """What the live leg hands to fusion: ranked rows, governance events, its trace entry."""

    rows: list[dict[str, Any]] = Field(default_factory=list)
    events: list[dict[str, Any]] = Field(default_factory=list)
    trace: dict[str, Any] = Field(default_factory=dict)
