"""The eval_gate check's comparison table, built from gate results: a row per gated figure
(metrics, cost/tokens/latency, the BM25 floor) with one typed schema, and the reasons as rows
when no figure shows them; and the check names the configured baseline."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from rag_assets.assets.evals import GATE_SCHEMA, gate_table
from rag_assets.definitions import build_definitions
from rag_engine.config import EvalsConfig
from tests.test_gate_models_cost import CFG as RESOURCE_CFG
from tests.test_gate_models_cost import judge, with_queries
from tests.test_gates import GOLDEN_B, always_first, gate, make_report, worse

ROOT = Path(__file__).resolve().parents[1]
TYPES = {"string": str, "float": float, "int": int, "bool": bool}


def rows(table: dg.TableMetadataValue) -> dict[str, dict]:
    """The table's rows by figure, after checking each value against the schema: every column
    present, of its declared type or null (no number written as text)."""
    assert table.schema == GATE_SCHEMA
    columns = {c.name: TYPES[c.type] for c in table.schema.columns}
    out = {}
    for record in table.records:
        assert set(record.data) == set(columns)
        for name, value in record.data.items():
            assert value is None or type(value) is columns[name], (name, value)
        out[record.data["figure"]] = record.data
    return out


def test_a_resource_regression_has_its_own_regressed_row():
    result = judge(with_queries(make_report(), cost="0.0050"), with_queries(make_report(), cost="0.0001"))
    assert result.status == "regression" and not result.regressed_metrics  # every metric row passes
    table = rows(gate_table(result))
    assert {f for f, r in table.items() if r["kind"] in ("metric", "resource")} == set(RESOURCE_CFG.gate_metrics)
    assert {r["kind"] for r in table.values()} == {"metric", "resource", "pack"}  # one pack: its rows, judged
    cost = table["cost_per_query"]
    assert cost["kind"] == "resource" and cost["regressed"] is True
    assert (cost["candidate"], cost["baseline"]) == (0.005, 0.0001)
    assert cost["delta"] == pytest.approx(0.0049) and cost["limit"] == pytest.approx(0.00011)
    assert table["tokens_per_query"]["regressed"] is False and table["latency_ratio"]["regressed"] is False
    ndcg = table["ndcg@10"]
    assert ndcg["kind"] == "metric" and ndcg["regressed"] is False and ndcg["n"] == 26
    assert ndcg["limit"] == pytest.approx(ndcg["baseline"] - RESOURCE_CFG.max_drop)


def test_an_unjudged_resource_says_so_instead_of_passing():
    table = rows(gate_table(judge(make_report(), make_report())))  # reports without tokens or a control
    tokens = table["tokens_per_query"]
    assert tokens["regressed"] is None and tokens["candidate"] is None and "not judged" in tokens["note"]


def test_the_bm25_floor_is_a_row_per_pack_and_metric():
    candidate = make_report(rank_of=worse, bm25_rank_of=always_first)
    result = gate(candidate, make_report(rank_of=worse), EvalsConfig(min_queries=20, bm25_margin=0.01))
    assert result.status == "regression" and not result.regressed_metrics
    table = rows(gate_table(result))
    floor = table["map@10 (legal_regulatory)"]
    assert floor["kind"] == "bm25_floor" and floor["regressed"] is True
    assert floor["baseline"] == 1.0 and floor["limit"] == pytest.approx(0.99)  # BM25's value, less the margin
    assert floor["candidate"] == pytest.approx(result.floor["legal_regulatory"]["map@10"].engine, abs=1e-6)
    assert {f for f, r in table.items() if r["kind"] == "bm25_floor"} == {
        "ndcg@10 (legal_regulatory)",
        "map@10 (legal_regulatory)",
    }


def test_an_incomparable_gate_lists_its_reasons_as_rows():
    result = gate(make_report(), make_report(golden_hash=GOLDEN_B))
    assert result.status == "incomparable" and result.metrics == {}
    table = rows(gate_table(result))
    mismatch = table["golden_hash_mismatch"]
    assert mismatch["kind"] == "incomparable" and mismatch["regressed"] is None
    assert mismatch["note"].startswith("baseline ") and mismatch["candidate"] is None
    assert table["ndcg@10 (legal_regulatory)"]["kind"] == "bm25_floor"  # the candidate's floor is still shown


def test_the_check_names_the_configured_baseline(tmp_path):
    config = tmp_path / "engine.yaml"
    text = (ROOT / "config" / "engine.yaml").read_text()
    config.write_text(text.replace("  seed: 7\n", "  seed: 7\n  baseline: evals/reports/OTHER_BASELINE.json\n", 1))
    key = dg.AssetCheckKey(dg.AssetKey("eval_report"), "eval_gate")
    description = build_definitions(str(config)).resolve_asset_graph().get_check_spec(key).description
    assert "evals/reports/OTHER_BASELINE.json" in description and "evals/reports/BASELINE.json" not in description
