"""`rag status` and Dagster agree about the gate, and status shows what it can without the store
(Dagster operations round two, item 6): after three failed eval_gate checks `rag status` said
"eval gate: none yet" (it read var/eval/gate.json only); with Neo4j stopped it printed one error line
and nothing else, although spend, automation and the gate live elsewhere; `rag config check` said
ok without probing the store."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import dagster as dg

from rag_assets import ci_gate
from rag_engine.config import config_hash, load_config
from rag_engine.engine import Engine
from rag_engine.ops.status import collect_status
from tests.conftest import ROOT
from tests.support.cli import rag

BASELINE = ROOT / "evals" / "reports" / "BASELINE.json"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(tmp_path: Path) -> Path:
    """The shipped config with the eval reports under tmp_path and no other gate directory."""
    text = (ROOT / "config" / "engine.yaml").read_text()
    path = tmp_path / "engine.yaml"
    text = text.replace("\nevals:", f"\nevals:\n  reports_dir: {tmp_path / 'reports'}", 1)
    path.write_text(text.replace("  gate_dirs: [var/eval]", "  gate_dirs: []", 1), encoding="utf-8")
    return path


def _regressed_candidate(tmp_path: Path, config: Path) -> Path:
    data = json.loads(BASELINE.read_text())
    data["config_hash"] = config_hash(load_config(config))
    for q in data["queries"]:
        if q.get("ndcg@10") is not None:
            q["ndcg@10"] = 0.0
    path = tmp_path / "candidate.json"
    path.write_text(json.dumps(data))
    return path


def test_rag_status_shows_the_result_of_the_dagster_gate_check(tmp_path):
    config = _config(tmp_path)
    candidate = _regressed_candidate(tmp_path, config)
    instance = dg.DagsterInstance.ephemeral()
    run, gate = ci_gate.run_gate(instance, str(config), str(candidate))
    assert gate.status == "regression"
    written = json.loads((tmp_path / "reports" / "gate.json").read_text())
    assert written["status"] == "regression" and written["recorded_by"].endswith(f"run {run.run_id}")

    engine = Engine(load_config(config), ROOT)
    try:
        shown = collect_status(engine, env={})["eval_gate"]
    finally:
        engine.close()
    assert shown is not None and shown["status"] == "regression"  # was: None ("none yet")
    assert run.run_id in shown["recorded_by"] and "eval_report:eval_gate" in shown["recorded_by"]
    assert any(r.startswith("regression: ndcg@10") for r in shown["reasons"])

    res = rag("--config", str(config), "status")  # the text line names the check and its run
    assert f"eval gate: regression ({tmp_path.name}" in res.stdout or "eval gate: regression (" in res.stdout
    assert run.run_id in res.stdout


def test_status_without_the_store_shows_the_gate_spend_and_automation(tmp_path):
    config = _config(tmp_path)
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "gate.json").write_text(json.dumps({"status": "pass", "exit_code": 0, "reasons": []}))
    uri = f"bolt://127.0.0.1:{_closed_port()}"
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = {"NEO4J_URI": uri, "DAGSTER_HOME": str(home)}
    res = rag("--config", str(config), "status", env=env)
    assert res.exit_code == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()  # the store: one line, as before
    assert len(lines) == 1 and "StoreUnavailable" in lines[0] and uri in lines[0] and "Traceback" not in res.stderr
    out = res.stdout
    assert f"store: unreachable: Neo4j is not reachable at {uri}" in out
    assert "eval gate: pass" in out and ("spend by model" in out or "spend: no usage recorded" in out)
    assert "automation (dagster_home" in out and "graph quality: unknown" in out

    res = rag("--config", str(config), "status", "--json", env=env)
    assert res.exit_code == 2
    data = json.loads(res.stdout)
    assert data["error"]["type"] == "StoreUnavailable" and data["store"]["reachable"] is False
    assert data["eval_gate"]["status"] == "pass" and "models" in data["spend"]
    assert data["automation"]["dagster_home"] == "dagster_home"
    assert data["embedder"] is None and data["quality"] is None
    assert {p["pack"] for p in data["packs"]} and all(p["documents"] is None for p in data["packs"])
    assert all(p["corpus_documents"] > 0 for p in data["packs"])


def test_config_check_probes_the_store(neo4j_driver):
    uri = f"bolt://127.0.0.1:{_closed_port()}"
    res = rag("config", "check", env={"NEO4J_URI": uri})
    assert res.exit_code == 2, res.stdout + res.stderr
    assert "config check: config ok, store unreachable" in res.stdout
    assert f"unreachable: Neo4j is not reachable at {uri}" in res.stdout
    assert len(res.stderr.strip().splitlines()) == 1
    res = rag("config", "check", "--json", env={"NEO4J_URI": uri})
    assert res.exit_code == 2 and json.loads(res.stdout)["error"]["type"] == "StoreUnavailable"

    res = rag("config", "check")  # the test store answers
    assert res.exit_code == 0, res.stdout + res.stderr
    assert "config check: ok" in res.stdout
    assert any(line.split()[1:4] == ["store", "│", "reachable"] for line in res.stdout.splitlines()), res.stdout


def test_status_without_the_ledger_still_shows_the_rest(tmp_path):
    config = _config(tmp_path)
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "gate.json").write_text(json.dumps({"status": "pass", "exit_code": 0, "reasons": []}))
    url = f"postgresql+psycopg2://postgres:sekrit@127.0.0.1:{_closed_port()}/rag_ledger"
    env = {"NEO4J_URI": f"bolt://127.0.0.1:{_closed_port()}", "RAG_LEDGER_URL": url}
    res = rag("--config", str(config), "status", "--json", env=env)
    data = json.loads(res.stdout)
    assert res.exit_code == 2 and data["spend"]["models"] == []
    assert data["spend"]["error"].startswith("LedgerUnavailable: ") and "sekrit" not in res.stdout
    assert data["eval_gate"]["status"] == "pass"
