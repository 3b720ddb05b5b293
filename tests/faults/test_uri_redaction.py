"""A password in $NEO4J_URI (``bolt://neo4j:PW@host``) is never printed.

`rag config check` shows the target redacted; the driver refuses userinfo with an error quoting
the whole URI, which the engine translates into a ConfigError without it; a connection that fails
(a closed port) names the redacted URI. The sentinel must appear in no stdout, stderr or exception
text. Real driver, real closed port; nothing of the engine is patched.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from rag_engine.engine import Engine
from rag_engine.errors import ConfigError, StoreUnavailable
from rag_engine.store.connection import check_reachable
from tests.conftest import ROOT, SENTINEL
from tests.support.cli import rag


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def userinfo_uri() -> str:
    return f"bolt://neo4j:{SENTINEL}@127.0.0.1:{_closed_port()}"


def test_config_check_redacts_the_password(userinfo_uri: str) -> None:
    for args in (("config", "check"), ("config", "check", "--json")):
        res = rag(*args, env={"NEO4J_URI": userinfo_uri})
        # the config is fine, the store probe refuses the URI (credentials in it): exit 2, all shown
        assert res.exit_code == 2, res.stdout + res.stderr
        assert SENTINEL not in res.stdout + res.stderr
        assert "bolt://neo4j:***@127.0.0.1" in res.stdout
    assert "neo4j:***@" in json.loads(res.stdout)["neo4j"]


def test_driver_refusing_userinfo_does_not_quote_the_password(userinfo_uri: str, tmp_path: Path) -> None:
    res = rag("status", env={"NEO4J_URI": userinfo_uri})
    assert res.exit_code == 2 and SENTINEL not in res.stdout + res.stderr
    assert "error: ConfigError: $NEO4J_URI is not a usable Neo4j URI (bolt://neo4j:***@" in res.stderr
    assert "credentials go in $NEO4J_USER/$NEO4J_PASSWORD" in res.stderr

    eng = Engine.from_path(root=ROOT, env={"NEO4J_URI": userinfo_uri})
    with pytest.raises(ConfigError) as caught:
        _ = eng.driver
    assert SENTINEL not in str(caught.value) and SENTINEL not in repr(eng.neo4j_target)


def test_failed_connection_names_the_redacted_uri() -> None:
    """A URI the driver accepts (a routing context value) to a closed port: the unreachable error."""
    uri = f"neo4j://127.0.0.1:{_closed_port()}?token={SENTINEL}"
    res = rag("status", env={"NEO4J_URI": uri})
    assert res.exit_code == 2 and SENTINEL not in res.stdout + res.stderr
    assert "error: StoreUnavailable: Neo4j is not reachable at neo4j://127.0.0.1:" in res.stderr
    assert "?token=***" in res.stderr

    eng = Engine.from_path(root=ROOT, env={"NEO4J_URI": uri})
    try:
        with pytest.raises(StoreUnavailable) as caught:
            check_reachable(eng.driver, eng.neo4j_target)
        assert SENTINEL not in str(caught.value) and SENTINEL not in caught.value.uri
    finally:
        eng.close()
