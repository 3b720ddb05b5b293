"""A session id is checked at the entry, the same on every ledger.

`--session` over 200 characters used to fail every query on a PostgreSQL ledger (the audit
column and the ledger's ``run_id``, ``session:<id>``, are 200 wide) while SQLite stored it. Now
``run_query`` and `rag query` refuse a session id over SESSION_ID_MAX characters, or with other
characters than the allowed ones, with a QueryInputError before anything runs, on SQLite and on
the real PostgreSQL alike; the longest allowed id is stored whole on both.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rag_engine.engine import Engine
from rag_engine.errors import QueryInputError
from rag_engine.governance.audit import audit_trail
from rag_engine.retrieval.query import run_query
from tests.conftest import ROOT, _embed_env, _neo4j_uri, fresh_pg_database, with_artifacts
from tests.support.cli import rag
from tests.support.packs import POLICY, RUNBOOK, temp_pack

SESSION_ID_MAX = 128  # the documented limit (rag_engine.governance.audit.SESSION_ID_MAX)


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path, postgres_url: str) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.sqlite'}"
        return
    with fresh_pg_database(postgres_url, "rag_session_") as url:
        yield url


@pytest.fixture
def kb_engine(base_config, tmp_path: Path, unique: str, ledger_url: str, neo4j_driver) -> Iterator[Engine]:
    from rag_engine.ingest.pipeline import ingest_pack

    cfg = with_artifacts(base_config, tmp_path / "artifacts")
    env = {"NEO4J_URI": _neo4j_uri(), "RAG_LEDGER_URL": ledger_url, **_embed_env()}
    pack = temp_pack(
        Engine(cfg, ROOT, env, packs=[]), unique, tmp_path / "corpus", {"policy.md": POLICY, "runbook.md": RUNBOOK}
    )
    eng = Engine(cfg, ROOT, env, packs=[pack])
    ingest_pack(eng, pack, extract=False)
    yield eng
    eng.close()


def _ask(eng: Engine, session: str):
    return run_query(
        eng, "How fast must a lost laptop be reported?", "employee", session_id=session, local_inference=False
    )


def test_session_id_limit_is_the_same_on_both_ledgers(kb_engine: Engine) -> None:
    longest = "s" + uuid.uuid4().hex + "-" * (SESSION_ID_MAX - 33)
    assert len(longest) == SESSION_ID_MAX
    _ask(kb_engine, longest)
    trail = audit_trail(kb_engine)
    (record,) = trail.records(session_id=longest, event="query")
    assert record.payload["run_id"] == f"session:{longest}"

    before = len(trail.records())
    for bad, message in (
        ("s" * 201, f"must be 1 to {SESSION_ID_MAX} characters"),
        ("s" * (SESSION_ID_MAX + 1), f"must be 1 to {SESSION_ID_MAX} characters"),
        ("", f"must be 1 to {SESSION_ID_MAX} characters"),
        ("two words", "may hold only letters, digits"),
        ("line\nbreak", "may hold only letters, digits"),
    ):
        with pytest.raises(QueryInputError, match=message):
            _ask(kb_engine, bad)
    assert len(trail.records()) == before  # refused before the query ran: nothing audited


def test_cli_refuses_a_long_session_before_touching_the_store() -> None:
    with socket.socket() as s:  # a closed port: the store is not what fails
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = rag(
        "query", "Who approves laptops?", "--role", "employee", "--session", "s" * 201,
        env={"NEO4J_URI": f"bolt://127.0.0.1:{port}"},
    )  # fmt: skip
    assert res.exit_code == 2
    assert res.stderr.startswith(f"error: QueryInputError: session id must be 1 to {SESSION_ID_MAX} characters")
    assert "got 201" in res.stderr
