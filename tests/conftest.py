"""Shared fixtures: the real Neo4j (started by `make test` via tools/neo4j-local, or NEO4J_URI),
the real PostgreSQL (tools/postgres-local), and engines isolated per test through their own
artifact directories and document ids."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import neo4j
import pytest

from rag_engine.config import EngineConfig, load_config
from rag_engine.engine import Engine
from tests.support.packs import POLICY, RUNBOOK

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


def _embed_env() -> dict[str, str]:
    """The embedding server `make test` started (RAG_EMBED_ENDPOINT), for engines built with an
    explicit env; without it the configured endpoint is used."""
    url = os.environ.get("RAG_EMBED_ENDPOINT")
    return {"RAG_EMBED_ENDPOINT": url} if url else {}


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


@pytest.fixture
def engine(base_config: EngineConfig, tmp_path: Path, neo4j_driver) -> Engine:
    env = {"NEO4J_URI": _neo4j_uri(), "RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}", **_embed_env()}
    eng = Engine(with_artifacts(base_config, tmp_path / "artifacts"), ROOT, env)
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def ingested_engine(base_config: EngineConfig, tmp_path_factory, neo4j_driver) -> Engine:
    """Both shipped packs ingested once per session through the engine's own pipeline."""
    from rag_engine.ingest.pipeline import ingest_pack

    base = tmp_path_factory.mktemp("ingested")
    env = {"NEO4J_URI": _neo4j_uri(), "RAG_LEDGER_URL": f"sqlite:///{base / 'ledger.sqlite'}", **_embed_env()}
    eng = Engine(with_artifacts(base_config, base / "artifacts"), ROOT, env)
    for pack in eng.packs.values():
        reports = ingest_pack(eng, pack)
        assert not reports["source_documents"].rejected, reports["source_documents"].rejected
    yield eng
    eng.close()


@pytest.fixture
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


@contextmanager
def fresh_pg_database(postgres_url: str, prefix: str) -> Iterator[str]:
    """A fresh database (no tables yet) on the test PostgreSQL server (``RAG_TEST_PG_LEDGER_URL``'s,
    else ``postgres_url``'s), named ``prefix`` and a random suffix, dropped after."""
    import sqlalchemy

    base = os.environ.get("RAG_TEST_PG_LEDGER_URL") or postgres_url.rsplit("/", 1)[0] + "/rag_ledger"
    name = prefix + uuid.uuid4().hex[:10]
    admin = sqlalchemy.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    try:
        yield base.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text(f"DROP DATABASE {name} WITH (FORCE)"))
        admin.dispose()


@pytest.fixture
def fresh_pg_url(postgres_url: str) -> Iterator[str]:
    """``fresh_pg_database`` for one test."""
    with fresh_pg_database(postgres_url, "rag_test_") as url:
        yield url


@pytest.fixture
def variant(tmp_path, unique, neo4j_driver):
    """Write a config variant: only a temporary copy of the KB pack, under a unique name."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "policy.md").write_text(POLICY)
    (corpus / "runbook.md").write_text(RUNBOOK)
    manifest = (ROOT / "packs/company_x_kb/manifest.yaml").read_text()
    base = (ROOT / "config/engine.yaml").read_text()
    base = base.replace(
        "  - name: legal_regulatory\n    enabled: true", "  - name: legal_regulatory\n    enabled: false"
    )
    # roles may only name collections of enabled packs
    base = base.replace("[legal_public, ", "[").replace(", legal_public]", "]").replace("[legal_public]", "[]")
    base = base.replace("  - name: company_x_kb\n", f"  - name: {unique}\n")
    base = base.replace("corpus: packs/company_x_kb/corpus", f"corpus: {corpus}")
    base = base.replace("artifacts_dir: var/artifacts", f"artifacts_dir: {tmp_path / 'artifacts'}")

    def write(name: str, *, manifest_version: str = "1.0.0", edit=lambda s: s) -> str:
        mpath = tmp_path / f"manifest-{name}.yaml"
        mpath.write_text(manifest.replace('version: "1.0.0"', f'version: "{manifest_version}"', 1))
        text = base.replace("manifest: packs/company_x_kb/manifest.yaml", f"manifest: {mpath}")
        text = text.replace(
            '    domain: kb\n    version: "1.0.0"', f'    domain: kb\n    version: "{manifest_version}"'
        )
        cpath = tmp_path / f"engine-{name}.yaml"
        cpath.write_text(edit(text))
        return str(cpath)

    return write


@pytest.fixture(scope="session", autouse=True)
def _drop_test_packs_at_exit():
    """Tests write under throwaway pack names; remove them so a developer's database does not
    grow with every `make test` (CI starts from an empty one anyway)."""
    yield
    try:
        driver = neo4j.GraphDatabase.driver(_neo4j_uri(), auth=None)
        with driver.session() as session:
            session.run(
                "MATCH (n) WHERE (n:Chunk OR n:Document OR n:Entity) AND n.pack =~ '(t[0-9a-f]{10}|seed_[0-9a-f]{8})' "
                "CALL (n) { DETACH DELETE n } IN TRANSACTIONS OF 5000 ROWS"
            ).consume()
            session.run(
                "MATCH (n) WHERE (n:DocumentVersion AND n.key =~ '(t[0-9a-f]{10}|seed_[0-9a-f]{8}):.*') "
                "OR (n:RefKey AND n.key =~ '(t[0-9a-f]{10}|seed_[0-9a-f]{8})\\\\|.*') "
                "CALL (n) { DETACH DELETE n } IN TRANSACTIONS OF 5000 ROWS"
            ).consume()
        driver.close()
    except (neo4j.exceptions.Neo4jError, neo4j.exceptions.DriverError):  # pragma: no cover - best effort hygiene
        pass
