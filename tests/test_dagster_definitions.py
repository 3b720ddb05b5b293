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
    out = subprocess.run(
        [exe, "definitions", "validate", "-w", "workspace.yaml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Validation successful" in out.stdout + out.stderr


def test_domain_packs_asset_reports_packs():
    defs = build_definitions()
    result = dg.materialize([defs.resolve_assets_def("domain_packs")])
    assert result.success
    meta = result.asset_materializations_for_node("domain_packs")[0].metadata
    assert meta["pack_count"].value == 3
    assert meta["domains"].value == {"legal_regulatory": "legal", "company_x_kb": "kb", "adgm_rulebooks": "regulatory"}
    (check,) = result.get_asset_check_evaluations()
    assert check.check_name == "packs_loaded" and check.passed


def test_a_broken_pack_leaves_the_others_running(variant, unique, tmp_path):
    """A manifest asking for rules its code does not implement: the location still loads, the
    pack's assets are absent, domain_packs fails its check with the typed error, and the other
    packs' assets and sensors, the automation sensor and the nightly schedule remain."""
    path = variant("broken")
    manifest = tmp_path / "manifest-broken.yaml"
    manifest.write_text(manifest.read_text().replace('rules_version: "1"', 'rules_version: "99"', 1))
    defs = build_definitions(path)
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert not any(k.startswith(f"{unique}/") for k in keys)
    assert "adgm_rulebooks/graph_writes" in keys
    assert defs.resolve_sensor_def("adgm_rulebooks__new_document_versions") is not None
    assert defs.resolve_sensor_def("rag_automation") is not None
    assert defs.resolve_schedule_def("nightly_graph_quality") is not None
    result = dg.materialize([defs.resolve_assets_def("domain_packs")], raise_on_error=False)
    (check,) = result.get_asset_check_evaluations()
    assert not check.passed
    assert check.description.startswith(f"{unique}: PackError:") and "rules_version '99'" in check.description


def test_each_partition_carries_its_own_figures(variant, unique):
    from rag_assets.assets.ingestion import partition_metadata
    from rag_assets.demo import materialize_pack

    defs = build_definitions(variant("base"))
    instance = dg.DagsterInstance.ephemeral()
    pack = defs.resources["rag"].engine().pack(unique)
    assert materialize_pack(defs, instance, pack).success
    chunks = {}
    for step in ("source_documents", "chunks", "chunk_index", "llm_extraction", "graph_writes"):
        for event in instance.fetch_materializations(dg.AssetKey([unique, step]), limit=10).records:
            mat = event.asset_materialization
            meta = mat.metadata
            # the test pack's chunks are not in the replay cassette: its extraction calls fail, so
            # that step is partial (no stamp; a run of the partition retries it), the others done
            want = "partial" if step == "llm_extraction" else "done"
            assert meta["outcome"].value == want and "seconds" in meta and "dagster/row_count" in meta
            if step == "source_documents":  # one document per partition
                assert meta["dagster/row_count"].value == 1 and meta["chars"].value > 0
            if step == "chunks":
                chunks[mat.partition] = meta["chunks"].value
            if step == "llm_extraction":
                assert "tokens" in meta and "llm_calls" in meta
                left = "failed call(s), not retried by themselves: materialize the partition again"
                assert left in meta["reason"].value  # what comes next, as it is (nothing retries them)
    # the two documents have different sizes: no partition shows the run's total
    assert len(chunks) == 2 and sum(chunks.values()) == 3 and len(set(chunks.values())) == 2
    # a rejected document version is a partition without a document
    assert partition_metadata("source_documents", "rejected", {"reason": "too large"}, 0.1)["dagster/row_count"] == 0


def test_snapshot_of_specs_jobs_schedules_and_sensors():
    defs = build_definitions()
    graph = defs.resolve_asset_graph()
    snap = {}
    for key in sorted(graph.get_all_asset_keys()):
        node = graph.get(key)
        if key.path[0] not in (
            "company_x_kb",
            "eval_report",
            "graph_quality",
            "domain_packs",
            "usage_costs",
            "audit_daily_summary",
        ):
            continue
        snap[key.to_user_string()] = (
            node.group_name,
            sorted(k.to_user_string() for k in node.parent_keys),
            tuple(node.owners),
            node.tags.get("cost"),
            node.automation_condition.get_label() if node.automation_condition else None,
        )
    assert snap == {
        "company_x_kb/chunk_index": (
            "kb",
            ["company_x_kb/chunks"],
            ("team:rag-platform",),
            "free",
            "free: eager + code version, written before",
        ),
        "company_x_kb/chunks": (
            "kb",
            ["company_x_kb/source_documents"],
            ("team:rag-platform",),
            "free",
            "free: eager + code version, written before",
        ),
        "company_x_kb/graph_writes": (
            "kb",
            ["company_x_kb/chunk_index", "company_x_kb/llm_extraction", "company_x_kb/references"],
            ("team:rag-platform",),
            "free",
            "free: eager + code version, after approved extraction",
        ),
        "company_x_kb/llm_extraction": (
            "kb",
            ["company_x_kb/chunks"],
            ("team:rag-platform",),
            "free",
            "paid: eager + code version, under cost limit",
        ),
        "company_x_kb/references": (
            "kb",
            ["company_x_kb/chunks"],
            ("team:rag-platform",),
            "free",
            "free: eager + code version, written before",
        ),
        "company_x_kb/source_documents": (
            "kb",
            [],
            ("team:rag-platform",),
            "free",
            "free: eager + code version, written before",
        ),
        "domain_packs": (
            "platform",
            [],
            ("team:rag-platform",),
            "free",
            "changed code version or never materialized",
        ),
        "eval_report": (
            "platform",
            [
                f"{p}/{s}"
                for p in ("adgm_rulebooks", "company_x_kb", "legal_regulatory")
                for s in ("chunk_index", "graph_writes")
            ],
            ("team:rag-platform",),
            "free",
            "paid: after index/graph changes have settled, under cost limit",
        ),
        "graph_quality": ("platform", [], ("team:rag-platform",), "free", "nightly 03:00 UTC or never materialized"),
        "usage_costs": (
            "platform",
            [],
            ("team:rag-platform",),
            "free",
            "on_cron(0 * * * *, UTC) or never materialized",
        ),
        "audit_daily_summary": (
            "platform",
            [],
            ("team:rag-platform",),
            "free",
            "on_cron(15 0 * * *, UTC) or never materialized",
        ),
    }
    assert sorted(j.name for j in defs.jobs if not j.name.startswith("__")) == [
        "adgm_rulebooks__ingest",
        "company_x_kb__ingest",
        "graph_cleanup",
        "graph_quality_checks",
        "legal_regulatory__ingest",
        "provider_swap_dry_run",
    ]
    assert [(s.name, s.cron_schedule) for s in defs.schedules] == [("nightly_graph_quality", "0 3 * * *")]
    assert sorted((s.name, s.default_status.value) for s in defs.sensors) == [
        ("adgm_rulebooks__new_document_versions", "STOPPED"),
        ("backfill_costs", "RUNNING"),
        ("company_x_kb__new_document_versions", "RUNNING"),
        ("legal_regulatory__new_document_versions", "RUNNING"),
        ("paid_work_approval_status", "RUNNING"),
        ("rag_automation", "RUNNING"),
    ]
    assert graph.get(dg.AssetKey("graph_quality")).freshness_policy is not None
    assert graph.get(dg.AssetKey("eval_report")).freshness_policy is not None
