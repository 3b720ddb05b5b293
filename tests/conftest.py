"""Shared fixtures: the real Neo4j (started by `make test` via tools/neo4j-local, or NEO4J_URI),
the real PostgreSQL (tools/postgres-local), and engines isolated per test through their own
artifact directories and document ids."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import neo4j
import pytest

from rag_engine.config import EngineConfig, load_config
from rag_engine.engine import Engine

ROOT = Path(__file__).resolve().parents[1]
SENTINEL = "sk-SENTINEL-DO-NOT-LEAK-7f3a9c"


def pytest_configure(config) -> None:
    """Code that builds its engine from the environment (Dagster definitions, the CLI) must not
    write the usage ledger into the working tree during tests."""
    import tempfile

    if "RAG_LEDGER_URL" not in os.environ:
        os.environ["RAG_LEDGER_URL"] = f"sqlite:///{Path(tempfile.mkdtemp(prefix='rag-ledger-')) / 'ledger.sqlite'}"


def _neo4j_uri() -> str:
    return os.environ.get("NEO4J_URI", "bolt://127.0.0.1:7687")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def base_config() -> EngineConfig:
    return load_config(ROOT / "config" / "engine.yaml")


@pytest.fixture(scope="session")
def neo4j_driver() -> neo4j.Driver:
    uri = _neo4j_uri()
    driver = neo4j.GraphDatabase.driver(uri, auth=None)
    try:
        driver.verify_connectivity()
    except Exception as exc:  # pragma: no cover - environment problem, reported clearly
        pytest.fail(f"Neo4j is not reachable at {uri} ({exc}); run `make neo4j-start` or use `make test`")
    yield driver
    driver.close()


def with_artifacts(cfg: EngineConfig, path: Path) -> EngineConfig:
    storage = cfg.storage.model_copy(update={"artifacts_dir": str(path)})
    return cfg.model_copy(update={"storage": storage})


@pytest.fixture()
def engine(base_config: EngineConfig, tmp_path: Path, neo4j_driver) -> Engine:
    env = {"NEO4J_URI": _neo4j_uri(), "RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}"}
    eng = Engine(with_artifacts(base_config, tmp_path / "artifacts"), ROOT, env)
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def ingested_engine(base_config: EngineConfig, tmp_path_factory, neo4j_driver) -> Engine:
    """Both shipped packs ingested once per session through the engine's own pipeline."""
    from rag_engine.ingest import ingest_pack

    base = tmp_path_factory.mktemp("ingested")
    env = {"NEO4J_URI": _neo4j_uri(), "RAG_LEDGER_URL": f"sqlite:///{base / 'ledger.sqlite'}"}
    eng = Engine(with_artifacts(base_config, base / "artifacts"), ROOT, env)
    for pack in eng.packs.values():
        reports = ingest_pack(eng, pack)
        assert not reports["source_documents"].rejected, reports["source_documents"].rejected
    yield eng
    eng.close()


@pytest.fixture()
def unique() -> str:
    """A prefix that keeps a test's document ids apart from every other test's."""
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture(scope="session")
def postgres_url() -> str:
    # explicit driver: SQLAlchemy 2.1 defaults postgresql:// to psycopg 3, which we do not ship
    url = os.environ.get("DAGSTER_PG_URL", "postgresql+psycopg2://postgres@127.0.0.1:55432/dagster")
    import sqlalchemy

    try:
        with sqlalchemy.create_engine(url).connect():
            pass
    except Exception as exc:  # pragma: no cover
        pytest.fail(f"PostgreSQL is not reachable at {url} ({exc}); run `make postgres-start` or use `make test`")
    return url
