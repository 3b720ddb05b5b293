"""Dagster runs stored in the real PostgreSQL instance storage, in process and with the
multiprocess executor."""

import os
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


def variant_ingest_job() -> dg.JobDefinition:
    """The test pack's ingestion job from the real definitions; every step process of the
    multiprocess executor rebuilds it from the environment the test sets."""
    return build_definitions(os.environ["RAG_CONFIG"]).resolve_job_def(f"{os.environ['RAG_TEST_PACK']}__ingest")


def test_ingestion_runs_with_the_multiprocess_executor_on_postgres(
    tmp_path, postgres_url, monkeypatch, variant, unique
):
    from rag_assets.demo import RANGE_END, RANGE_START, register_partitions

    config = variant("multiprocess")
    for name, value in (("DAGSTER_PG_URL", postgres_url), ("RAG_CONFIG", config), ("RAG_TEST_PACK", unique)):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "config" / "dagster-postgres.yaml").read_text())
    pack = build_definitions(config).resources["rag"].engine().pack(unique)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        keys = register_partitions(instance, pack)
        assert len(keys) == 2
        with dg.execute_job(
            dg.reconstructable(variant_ingest_job),
            instance=instance,
            run_config={"execution": {"config": {"multiprocess": {"max_concurrent": 2}}}},
            tags={RANGE_START: keys[0], RANGE_END: keys[-1]},
        ) as result:
            assert result.success
            events = result.all_events
        assert instance.get_run_by_id(result.run_id).status == dg.DagsterRunStatus.SUCCESS
        starts = [e for e in events if e.event_type_value == "STEP_START"]
        assert len(starts) == 6  # one step per ingestion asset, each over both partitions
        # every step ran in its own process, none in the run's own
        step_pids = {e.pid for e in starts}
        assert len(step_pids) == 6
        assert os.getpid() not in step_pids
        for step in ("chunk_index", "graph_writes"):
            done = instance.fetch_materializations(dg.AssetKey([unique, step]), limit=10).records
            assert sorted(r.asset_materialization.partition for r in done) == sorted(keys)
