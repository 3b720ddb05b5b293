"""Item 16: a role naming a collection no enabled pack has is a typed startup rejection.

The probe: ``ghost: [no_such_collection]`` passed ``rag config check``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rag_engine.config import load_config
from rag_engine.errors import ConfigError, UnknownRoleCollection
from tests.conftest import ROOT
from tests.support.cli import rag

CONFIG = (ROOT / "config" / "engine.yaml").read_text(encoding="utf-8")


def _add_role(text: str, line: str) -> str:
    return re.sub(r"(?m)^(roles:.*)$", lambda m: f"{m.group(1)}\n{line}", text, count=1)


def _with_role(tmp_path: Path, line: str) -> tuple[Path, int]:
    text = _add_role(CONFIG, line)
    path = tmp_path / "engine.yaml"
    path.write_text(text, encoding="utf-8")
    return path, next(i for i, ln in enumerate(text.splitlines(), 1) if ln == line)


def test_a_role_naming_an_unknown_collection_is_rejected_with_file_and_line(tmp_path):
    path, line = _with_role(tmp_path, "  ghost: [kb_public, no_such_collection]")
    with pytest.raises(UnknownRoleCollection) as exc:
        load_config(path)
    assert isinstance(exc.value, ConfigError)
    msg = str(exc.value)
    assert (
        f"engine.yaml:{line}: roles.ghost:" in msg
        and "no_such_collection" in msg
        and "kb_public'" not in msg.split("known")[0]
    ), msg


def test_a_role_naming_a_disabled_packs_collection_is_rejected(tmp_path):
    text = CONFIG.replace("  - name: company_x_kb\n    enabled: true", "  - name: company_x_kb\n    enabled: false")
    assert text != CONFIG
    text = _add_role(text, "  kb_reader: [kb_internal]")
    path = tmp_path / "engine.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UnknownRoleCollection, match="kb_internal"):
        load_config(path)


def test_config_check_fails_on_a_ghost_role(tmp_path, capsys):
    path, _ = _with_role(tmp_path, "  ghost: [no_such_collection]")
    res = rag("--config", str(path), "config", "check")
    assert res.exit_code == 2
    err = res.stderr
    assert "UnknownRoleCollection" in err and "ghost" in err


def test_the_shipped_roles_are_accepted():
    cfg = load_config(ROOT / "config" / "engine.yaml")
    known = {c for p in cfg.enabled_packs for c in p.collections}
    assert cfg.roles and all(set(cols) <= known for cols in cfg.roles.values())
