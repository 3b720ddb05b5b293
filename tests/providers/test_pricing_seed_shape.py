"""The seed's pricing file shape (top-level ``provider/model`` keys) is accepted as written,
beside the versioned ``version:`` + ``models:`` shape."""

from __future__ import annotations

import hashlib
from decimal import Decimal
from pathlib import Path

import pytest

from rag_engine.errors import ConfigError
from rag_engine.providers.pricing import load_pricing, price_key

SEED = """\
openai/gpt-4.1:
  input_per_million: 2.00
  cached_input_per_million: 0.50
  output_per_million: 8.00
openai/text-embedding-3-small:
  input_per_million: 0.02
  cached_input_per_million: 0.02
  output_per_million: 0
"""


def test_flat_shape_without_version_is_versioned_by_content_hash(tmp_path: Path) -> None:
    path = tmp_path / "pricing.yaml"
    path.write_text(SEED, encoding="utf-8")
    table = load_pricing(path)
    assert table.version == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    assert set(table.models) == {"openai/gpt-4.1", "openai/text-embedding-3-small"}
    # 1000 in (400 cached) + 200 out at 2.00 / 0.50 / 8.00 per million
    assert table.price("openai/gpt-4.1", 1000, 400, 200) == Decimal("0.0012") + Decimal("0.0002") + Decimal("0.0016")
    path.write_text(SEED.replace("8.00", "9.00"), encoding="utf-8")
    assert load_pricing(path).version != table.version  # a price edit is a new version


def test_flat_shape_takes_its_version_key(tmp_path: Path) -> None:
    path = tmp_path / "pricing.yaml"
    path.write_text("version: 2026-12-01\n" + SEED, encoding="utf-8")
    table = load_pricing(path)
    assert table.version == "2026-12-01"
    assert "version" not in table.models


def test_flat_shape_entries_are_still_validated(tmp_path: Path) -> None:
    path = tmp_path / "pricing.yaml"
    path.write_text(SEED.replace("output_per_million: 8.00", "output_per_milion: 8.00"), encoding="utf-8")
    with pytest.raises(ConfigError, match="invalid pricing"):
        load_pricing(path)


def test_shipped_versioned_shape_unchanged(repo_root: Path) -> None:
    table = load_pricing(repo_root / "config/pricing.yaml")
    assert table.version == "2026-11-01" and "gpt-4o-mini" in table.models


def test_price_key_falls_back_to_provider_slash_model() -> None:
    assert price_key("gpt-4o-mini", "openai", "gpt-4o-mini") == "gpt-4o-mini"
    assert price_key(None, "openai", "gpt-4.1") == "openai/gpt-4.1"
