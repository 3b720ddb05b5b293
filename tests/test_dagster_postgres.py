"""A Dagster run stored in the real PostgreSQL instance storage."""

from pathlib import Path

import dagster as dg
import sqlalchemy

from rag_assets.definitions import build_definitions

ROOT = Path(__file__).resolve().parents[1]


def test_run_is_stored_in_postgres(tmp_path, postgres_url, monkeypatch):
    monkeypatch.setenv("DAGSTER_PG_URL", postgres_url)
    (tmp_path / "dagster.yaml").write_text((ROOT / "config" / "dagster-postgres.yaml").read_text())
    defs = build_definitions()
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        result = dg.materialize([defs.resolve_assets_def("domain_packs")], instance=instance)
        assert result.success
        run_id = result.run_id
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.SUCCESS
    # read it back straight from PostgreSQL, not through Dagster's cache
    engine = sqlalchemy.create_engine(postgres_url)
    with engine.connect() as conn:
        status = conn.execute(sqlalchemy.text("SELECT status FROM runs WHERE run_id = :r"), {"r": run_id}).scalar()
        events = conn.execute(
            sqlalchemy.text(
                "SELECT count(*) FROM event_logs WHERE run_id = :r AND dagster_event_type = 'ASSET_MATERIALIZATION'"
            ),
            {"r": run_id},
        ).scalar()
    assert status == "SUCCESS"
    assert events == 1
