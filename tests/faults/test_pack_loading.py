"""Pack loading faults: a pack whose code fails, an installed entry point that shadows
the configured module, a factory that is not a pack's.

A broken pack is that pack's PackError alone: the other packs load, every command still runs
and names it in one line, and the Dagster definitions load without it. Explicit config beats an
entry point: one naming another target under the pack's name is refused, never chosen. ``module:``
must be a module in the pack's ``path`` and the factory a function or DomainPack class defined
there. Real modules and a real installed distribution (a ``*.dist-info`` on ``sys.path``); nothing
of the engine is patched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from rag_engine import errors
from rag_engine.config import EngineConfig, PackEntry
from rag_engine.errors import PackError
from rag_engine.packs import DomainPack, load_pack, load_packs
from tests.conftest import ROOT
from tests.support.cli import rag

RAISES_AT_IMPORT = {
    "RuntimeError": 'raise RuntimeError("pack code failed at import")\n',
    "SyntaxError": "def build_pack(entry, manifest, root)\n    return None\n",
    "JSONDecodeError": "import json\n\nSETTINGS = json.loads('{not json')\n",
    "SystemExit": "import sys\n\nsys.exit(3)\n",
}

FACTORY_RAISES = """
def build_pack(entry, manifest, root):
    raise KeyError("settings")
"""

SHADOW_PACK = '''"""An installed pack that relabels every collection public."""
from rag_engine.packs import DomainPack


class Everything(DomainPack):
    def describe_document(self, doc_id, text):
        return doc_id, "kb_public", "en"

    def chunk(self, doc):
        return []

    def extract_references(self, chunk):
        return []


def build_pack(entry, manifest, root):
    return Everything(entry, manifest, root)
'''


def _module(directory: Path, source: str, prefix: str = "probe_pack") -> str:
    """A pack module in ``directory`` (the pack's path), named uniquely for this test."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.py").write_text(source, encoding="utf-8")
    return name


def _entry(
    base_config: EngineConfig, name: str, path: Path | str, module: str, factory: str = "build_pack"
) -> PackEntry:
    kb = base_config.pack("company_x_kb")
    assert kb is not None
    return kb.model_copy(update={"name": name, "path": str(path), "module": module, "factory": factory})


def _config_with(tmp_path: Path, name: str, module: str) -> Path:
    """The shipped config plus one more enabled pack (the KB's manifest and corpus, its own module)."""
    text = (ROOT / "config" / "engine.yaml").read_text(encoding="utf-8")
    extra = (
        f"  - name: {name}\n    enabled: true\n    path: {tmp_path}\n    module: {module}\n"
        "    factory: build_pack\n    manifest: packs/company_x_kb/manifest.yaml\n"
        "    fixtures: packs/company_x_kb/golden\n    corpus: packs/company_x_kb/corpus\n"
        '    domain: kb\n    version: "1.0.0"\n    reference_types: [policy, runbook, ticket]\n'
        "    languages: [en]\n    collections: [kb_public, kb_internal]\n\nroles:"
    )
    assert text.count("\nroles:") == 1
    path = tmp_path / "engine.yaml"
    path.write_text(text.replace("\nroles:", "\n" + extra, 1), encoding="utf-8")
    return path


def _installed(site: Path, entry_points: str, modules: dict[str, str] | None = None) -> Path:
    """A distribution installed into ``site``: its dist-info (entry points) and its modules."""
    dist = site / f"probe_dist_{uuid.uuid4().hex[:8]}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.name.split('-')[0]}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(entry_points, encoding="utf-8")
    for name, source in (modules or {}).items():
        (site / f"{name}.py").write_text(source, encoding="utf-8")
    return site


# -- M4: a pack that fails is its own PackError -------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(RAISES_AT_IMPORT))
def test_pack_failing_at_import_is_its_own_pack_error(
    kind: str, base_config: EngineConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    module = _module(tmp_path, RAISES_AT_IMPORT[kind])
    entry = _entry(base_config, "probe_broken", tmp_path, module)
    cfg = base_config.model_copy(update={"packs": (*base_config.packs, entry)})
    packs, broken = load_packs(cfg, ROOT)
    assert [p.name for p in packs] == [p.name for p in base_config.enabled_packs]
    assert list(broken) == ["probe_broken"]
    assert isinstance(broken["probe_broken"], PackError)
    assert f"cannot import {module}: {kind}" in str(broken["probe_broken"])


def test_factory_raising_is_its_own_pack_error(
    base_config: EngineConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    module = _module(tmp_path, FACTORY_RAISES)
    with pytest.raises(PackError, match=rf"factory {module}:build_pack failed: KeyError"):
        load_pack(_entry(base_config, "probe_broken", tmp_path, module), ROOT)


def test_commands_run_with_a_pack_that_fails_at_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, neo4j_driver
) -> None:
    """rag packs lint, ingest --pack <another>, query and status: the broken pack is one line, the
    others work (exit 0 where nothing else failed; lint and smoke fail their check, exit 1)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    module = _module(tmp_path, RAISES_AT_IMPORT["RuntimeError"])
    config = str(_config_with(tmp_path, "probe_broken", module))
    line = f"broken pack left out: PackError: pack 'probe_broken': cannot import {module}: RuntimeError"

    lint = rag("--config", config, "packs", "lint", "--json")
    assert lint.exit_code == 1, lint.stdout + lint.stderr
    report = json.loads(lint.stdout)
    assert [p["pack"] for p in report["packs"]][-1] == "probe_broken"
    errors = {(f["pack"], f["code"]) for f in report["findings"] if f["severity"] == "error"}
    assert ("probe_broken", "pack_load") in errors and {pack for pack, _ in errors} == {"probe_broken"}

    smoke = rag("--config", config, "packs", "smoke", "--json")
    assert smoke.exit_code == 1 and line in smoke.stderr
    assert json.loads(smoke.stdout)["pack_count"] == 3 and "probe_broken" in json.loads(smoke.stdout)["broken"]

    ingest = rag("--config", config, "ingest", "--pack", "company_x_kb", "--no-extract", "--json")
    assert ingest.exit_code == 0, ingest.stdout + ingest.stderr
    assert list(json.loads(ingest.stdout)["packs"]) == ["company_x_kb"]

    mine = rag("--config", config, "ingest", "--pack", "probe_broken", "--no-extract")
    assert mine.exit_code == 2 and "error: PackError: pack 'probe_broken': cannot import" in mine.stderr

    query = rag("--config", config, "query", "Who approves laptop exceptions?", "--role", "employee", "--no-generate")
    assert query.exit_code == 0, query.stdout + query.stderr
    (said,) = [ln for ln in query.stderr.splitlines() if "probe_broken" in ln]  # one line, no traceback
    assert said.startswith(f"warning: {line}") and "Traceback" not in query.stderr

    status = rag("--config", config, "status", "--json")
    assert status.exit_code == 0, status.stdout + status.stderr
    data = json.loads(status.stdout)
    assert "probe_broken" not in [p["pack"] for p in data["packs"]]
    assert data["broken_packs"]["probe_broken"].startswith("PackError: pack 'probe_broken': cannot import")


def test_dagster_definitions_load_without_a_pack_that_fails_at_import(tmp_path: Path) -> None:
    """`import rag_assets.definitions` in a fresh interpreter, as the code server does."""
    module = _module(tmp_path, RAISES_AT_IMPORT["RuntimeError"])
    config = _config_with(tmp_path, "probe_broken", module)
    script = (
        "import json, rag_assets.definitions as d\n"
        "keys = sorted(k.to_user_string() for k in d.defs.resolve_asset_graph().get_all_asset_keys())\n"
        "from rag_assets.resources import broken_packs\n"
        "print(json.dumps({'keys': keys, 'broken': broken_packs(str(__import__('os').environ['RAG_CONFIG']))}))\n"
    )
    env = {**os.environ, "RAG_CONFIG": str(config), "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert "company_x_kb/graph_writes" in result["keys"] and "legal_regulatory/chunks" in result["keys"]
    assert not any(k.startswith("probe_broken/") for k in result["keys"])
    assert result["broken"]["probe_broken"].startswith("PackError: pack 'probe_broken': cannot import")


# -- M5: an installed entry point never silently replaces the configured module ------------------------


def test_entry_point_shadowing_the_configured_module_is_refused(
    base_config: EngineConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shadow = f"probe_shadow_{uuid.uuid4().hex[:8]}"
    site = _installed(
        tmp_path / "site", f"[rag_engine.packs]\ncompany_x_kb = {shadow}:build_pack\n", {shadow: SHADOW_PACK}
    )
    monkeypatch.syspath_prepend(str(site))
    packs, broken = load_packs(base_config, ROOT)
    assert [p.name for p in packs] == ["legal_regulatory", "adgm_rulebooks"]
    error = broken["company_x_kb"]
    assert isinstance(error, errors.PackShadowed)
    assert "packs.company_x_kb.pack:build_pack" in str(error) and f"{shadow}:build_pack" in str(error)
    assert shadow not in sys.modules  # refused before its code ran

    lint = rag("packs", "lint", "--pack", "company_x_kb", "--json")
    assert lint.exit_code == 1, lint.stdout + lint.stderr
    (finding,) = [f for f in json.loads(lint.stdout)["findings"] if f["severity"] == "error"]
    assert finding["code"] == "entry_point_shadow" and f"{shadow}:build_pack" in finding["message"]


def test_entry_point_naming_the_configured_module_is_accepted(
    base_config: EngineConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = _installed(tmp_path / "site", "[rag_engine.packs]\ncompany_x_kb = packs.company_x_kb.pack:build_pack\n")
    monkeypatch.syspath_prepend(str(site))
    packs, broken = load_packs(base_config, ROOT)
    assert broken == {} and [p.name for p in packs] == [p.name for p in base_config.enabled_packs]


# -- L8: module and factory must be the pack's -------------------------------------------------------


def test_module_outside_the_pack_is_refused(base_config: EngineConfig) -> None:
    entry = _entry(base_config, "probe_json", "packs/company_x_kb", "json", factory="loads")
    with pytest.raises(PackError, match=r"module json .* is not a pack module: it must lie inside"):
        load_pack(entry, ROOT)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("from json import loads as build_pack\n", "must be a function or class defined in"),
        ("build_pack = dict\n", "must be a function or class defined in"),
        (
            "class build_pack:\n    def __init__(self, **kw):\n        pass\n",
            "factory class build_pack is not a DomainPack",
        ),
        (
            "def build_pack(entry, manifest, root):\n    return {'name': entry.name}\n",
            "returned dict, not a DomainPack",
        ),
    ],
)
def test_factory_that_is_not_the_packs_is_refused(
    source: str, message: str, base_config: EngineConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    module = _module(tmp_path, source)
    with pytest.raises(PackError, match=message):
        load_pack(_entry(base_config, "probe_factory", tmp_path, module), ROOT)


def test_shipped_packs_still_load(base_config: EngineConfig) -> None:
    packs, broken = load_packs(base_config, ROOT)
    assert broken == {} and [p.name for p in packs] == [p.name for p in base_config.enabled_packs]
    assert all(isinstance(p, DomainPack) for p in packs)
