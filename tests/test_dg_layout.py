"""The `dg` project layout is real (Dagster operations round two, item 10): ``[tool.dg]`` declared a
project with no defs folder, so `dg scaffold defs` crashed (NotADirectoryError: it took
``rag_assets/definitions.py`` for the folder). Now ``rag_assets/defs`` is the defs module:
a scaffolded asset lands there and `dg list defs` shows it beside the engine-built definitions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

DG = Path(sys.executable).parent / "dg"


def _project_copy(tmp_path: Path) -> Path:
    """The project with its own rag_assets (dg writes there); the rest linked, not copied."""
    copy = tmp_path / "project"
    copy.mkdir()
    shutil.copytree(ROOT / "rag_assets", copy / "rag_assets", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("rag_engine", "evals", "packs", "config"):
        (copy / name).symlink_to(ROOT / name)
    for name in ("pyproject.toml", "workspace.yaml"):
        shutil.copy(ROOT / name, copy / name)
    return copy


def _dg(copy: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(copy), "DAGSTER_HOME": str(home), "RAG_ROOT": str(copy)}
    return subprocess.run([str(DG), *args], cwd=copy, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_dg_scaffold_defs_writes_into_the_defs_folder_and_dg_lists_it(tmp_path):
    assert (ROOT / "rag_assets" / "defs" / "__init__.py").is_file()
    copy = _project_copy(tmp_path)
    made = _dg(copy, tmp_path, "scaffold", "defs", "dagster.asset", "probe_asset.py")
    assert made.returncode == 0, made.stdout + made.stderr
    assert (copy / "rag_assets" / "defs" / "probe_asset.py").is_file()
    listed = _dg(copy, tmp_path, "list", "defs", "--json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    keys = {a["asset_key"] for a in json.loads(listed.stdout)["assets"]}
    assert "probe_asset" in keys  # the scaffolded asset
    assert "eval_report" in keys and "usage_costs" in keys  # beside the engine-built ones
