"""The code location loads, shows a group per pack, and refuses a bad registry with the typed error."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from rag_assets.definitions import build_definitions
from rag_engine.errors import DisabledActiveEmbedder

ROOT = Path(__file__).resolve().parents[1]


def test_definitions_have_assets_per_pack_in_their_domain_group():
    defs = build_definitions()
    graph = defs.resolve_asset_graph()
    groups = {key.to_user_string(): graph.get(key).group_name for key in graph.get_all_asset_keys()}
    for pack, domain in (("legal_regulatory", "legal"), ("company_x_kb", "kb")):
        for step in ("source_documents", "chunks", "references", "chunk_index", "llm_extraction", "graph_writes"):
            assert groups[f"{pack}/{step}"] == domain
    assert groups["domain_packs"] == "platform"
    assert defs.resolve_job_def("legal_regulatory__ingest") is not None


def test_bad_registry_stops_loading_with_typed_error(tmp_path):
    text = (ROOT / "config" / "engine.yaml").read_text()
    block = "    kind: openai_compatible\n    hosted: false\n    enabled: {}\n    endpoint: http://127.0.0.1:8765/v1"
    bad = text.replace(block.format("true"), block.format("false"))  # the active embedder's provider
    assert bad != text
    path = tmp_path / "engine.yaml"
    path.write_text(bad)
    with pytest.raises(DisabledActiveEmbedder):
        build_definitions(str(path))


def test_dagster_cli_validates_the_workspace(tmp_path):
    dagster = Path(sys.executable).parent / "dagster"
    exe = str(dagster) if dagster.exists() else shutil.which("dagster")
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    (tmp_path / "dagster.yaml").write_text((ROOT / "config" / "dagster.yaml").read_text())
    out = subprocess.run([exe, "definitions", "validate", "-w", "workspace.yaml"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Validation successful" in out.stdout + out.stderr


def test_domain_packs_asset_reports_packs():
    defs = build_definitions()
    result = dg.materialize([defs.resolve_assets_def("domain_packs")])
    assert result.success
    meta = result.asset_materializations_for_node("domain_packs")[0].metadata
    assert meta["pack_count"].value == 3
    assert meta["domains"].value == {"legal_regulatory": "legal", "company_x_kb": "kb",
                                     "adgm_rulebooks": "regulatory"}
    (check,) = result.get_asset_check_evaluations()
    assert check.check_name == "packs_loaded" and check.passed
