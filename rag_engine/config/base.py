"""What every part of the config schema shares: frozen models that refuse unknown keys, checks of
environment variable NAMES, exact decimals, and paths relative to the project root."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _env_name(value: str | None) -> str | None:
    if value is not None and not ENV_NAME.match(value):
        raise ValueError("must be an environment variable NAME (A-Z, 0-9, _), never a secret value")
    return value


def _exact_decimal(value: Any) -> Any:
    """YAML may hand over a float (unquoted 0.1): go through its shortest repr, not its binary value."""
    return Decimal(repr(value)) if isinstance(value, float) else value


def under_root(root: str | Path, value: str | Path) -> Path:
    """Paths in the config are relative to the project root unless absolute."""
    path = Path(value)
    return path if path.is_absolute() else Path(root) / path
