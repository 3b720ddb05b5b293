"""`python -m rag_assets.ci_gate`: the eval gate as the Dagster asset check on a PostgreSQL
instance, over a report the runner wrote (here: the committed baseline, restamped with this
config's hash, as the candidate), printed like `python -m evals.gates` with its exit code."""

import json
from pathlib import Path

import pytest

from rag_assets import ci_gate
from rag_engine.config import config_hash, load_config

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "evals" / "reports" / "BASELINE.json"

pytestmark = pytest.mark.postgres


def _config(tmp_path: Path) -> Path:
    """The shipped config with the eval reports under tmp_path (not the working tree's var/)."""
    text = (ROOT / "config" / "engine.yaml").read_text()
    path = tmp_path / "engine.yaml"
    path.write_text(text.replace("\nevals:", f"\nevals:\n  reports_dir: {tmp_path / 'reports'}", 1))
    return path


def _candidate(tmp_path: Path, config: Path, *, stamp: bool = True, drop_ndcg: bool = False) -> Path:
    data = json.loads(BASELINE.read_text())
    if stamp:
        data["config_hash"] = config_hash(load_config(config))
    if drop_ndcg:
        for q in data["queries"]:
            if q.get("ndcg@10") is not None:
                q["ndcg@10"] = 0.0
    path = tmp_path / "candidate.json"
    path.write_text(json.dumps(data))
    return path


def test_a_regression_fails_the_dagster_check_with_its_reasons(tmp_path, postgres_url, monkeypatch, capsys):
    monkeypatch.setenv("DAGSTER_PG_URL", postgres_url)
    config = _config(tmp_path)
    code = ci_gate.main(["--config", str(config), "--report", str(_candidate(tmp_path, config, drop_ndcg=True))])
    out, err = capsys.readouterr()
    assert code == 1, err
    assert "Dagster asset check eval_report:eval_gate (run " in out and "PostgresRunStorage" in out, err
    assert "eval gate: REGRESSION (exit 1)" in out
    lines = out.splitlines()
    assert any(line.split()[:1] == ["ndcg@10"] and line.endswith("REGRESSED") for line in lines)
    assert any(line.split()[:1] == ["recall@5"] and not line.endswith("REGRESSED") for line in lines)
    assert any(line.startswith("  - regression: ndcg@10 mean delta") for line in lines)
    # the recorded report is the file given, byte for byte
    assert (tmp_path / "reports" / "latest.json").read_bytes() == (tmp_path / "candidate.json").read_bytes()


def test_a_report_made_for_another_config_is_refused(tmp_path, postgres_url, monkeypatch, capsys):
    monkeypatch.setenv("DAGSTER_PG_URL", postgres_url)
    config = _config(tmp_path)
    code = ci_gate.main(["--config", str(config), "--report", str(_candidate(tmp_path, config, stamp=False))])
    err = capsys.readouterr().err
    assert code == 1
    assert "eval_report failed" in err and "was not made for this engine: config hash" in err
