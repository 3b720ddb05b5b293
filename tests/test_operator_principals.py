"""Operators are principals: with principals configured, `rag audit`, `status`, `costs` and every
approval need the key of a principal holding ``serving.operator_role`` (in ``RAG_KEY`` or a key
file), and an approval is made in that principal's name. Through the real CLI (in-process), on the
real Neo4j and a SQLite ledger of the test's own: a revoked key refused, an analyst refused, an
operator accepted, an approval in someone else's name refused, `rag query` with a key run as its
principal (the actor of its audit and usage records), the unauthenticated marker with no principal
configured, and the keys (sentinels) nowhere in any output, the ledger or the audit trail.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml

from rag_engine.config import load_config
from rag_engine.engine import Engine
from rag_engine.governance.audit import audit_trail
from rag_engine.ingest.pipeline import ingest_pack
from tests.conftest import ROOT
from tests.support.cli import rag
from tests.support.sqlite_bytes import read_apart

OPS_KEY = "SENTINEL-ops-key-5d1e0c9b8a7f46e3a2b1c0d9e8f7a6b5"
ANALYST_KEY = "SENTINEL-analyst-key-1f2e3d4c5b6a79880716253443526170"


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def with_principals(ops_file: Path):
    def edit(text: str) -> str:
        cfg = yaml.safe_load(text)
        cfg["serving"] = {
            "principals": [
                {"id": "ops-1", "roles": ["operator", "employee"], "key_sha256_file": str(ops_file)},
                {"id": "analyst", "roles": ["employee", "public"], "key_sha256_env": "RAG_TEST_ANALYST_SHA256"},
            ]
        }
        return yaml.safe_dump(cfg, sort_keys=False)

    return edit


class Cli:
    """`rag --config <variant>` with the test's ledger; every result is kept for the leak check."""

    def __init__(self, config: str, ledger: Path, neo4j_uri: str):
        self.config = config
        self.env = {
            "RAG_LEDGER_URL": f"sqlite:///{ledger}",
            "NEO4J_URI": neo4j_uri,
            "RAG_TEST_ANALYST_SHA256": sha(ANALYST_KEY),
        }
        self.unset = {"RAG_KEY": None, "RAG_KEY_FILE": None}  # the runner's own environment holds no key
        self.outputs: list[str] = []

    def __call__(self, *args: str, key: str | None = None, key_file: Path | None = None):
        env = {**self.env, **self.unset, **({"RAG_KEY": key} if key is not None else {})}
        pre = ["--key-file", str(key_file)] if key_file is not None else []
        res = rag("--config", self.config, *pre, *args, env=env)
        self.outputs.append(res.stdout + res.stderr)
        return res

    def engine(self) -> Engine:
        return Engine(load_config(self.config), ROOT, {**os.environ, **self.env})


def refused(res, kind: str) -> str:
    """A refusal: exit 2, one line on stderr naming the typed error."""
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and f"error: {kind}:" in lines[0], lines
    return lines[0]


@pytest.fixture
def setup(variant, tmp_path, neo4j_driver):
    from tests.conftest import _neo4j_uri

    ops_file = tmp_path / "ops.sha256"
    ops_file.write_text(f"{sha(OPS_KEY)}  # issued to ops-1\n", encoding="utf-8")
    config = variant("operators", edit=with_principals(ops_file))
    ledger = tmp_path / "ledger.sqlite"
    return Cli(config, ledger, _neo4j_uri()), ops_file, ledger


def test_operator_commands_need_an_operator_key(setup, tmp_path):
    cli, _, _ = setup
    for args in (("audit",), ("costs",), ("costs", "--by-actor"), ("audit", "purge", "--dry-run")):
        assert "RAG_KEY" in refused(cli(*args, "--json"), "Unauthenticated")  # no key: says where one goes
        refused(cli(*args), "Unauthenticated")
        assert "invalid key" in refused(cli(*args, key="not-a-key"), "Unauthenticated")
        assert "operator" in refused(cli(*args, key=ANALYST_KEY), "Forbidden")  # an analyst is no operator
        ok = cli(*args, "--json", key=OPS_KEY)
        assert ok.exit_code == 0, ok.stderr
        json.loads(ok.stdout)
    for args in (("status",), ("cleanup", "--dry-run"), ("reindex", "--dry-run")):
        refused(cli(*args, "--json"), "Unauthenticated")
        refused(cli(*args, key=ANALYST_KEY), "Forbidden")
        ok = cli(*args, "--json", key=OPS_KEY)
        assert ok.exit_code in (0, 1), ok.stderr  # status/quality may fail a check on a shared store
        json.loads(ok.stdout)
    # the key from a file instead of the environment (never an argument)
    key_file = tmp_path / "my.key"
    key_file.write_text(OPS_KEY + "\n", encoding="utf-8")
    assert cli("audit", "--json", key_file=key_file).exit_code == 0
    assert "cannot be read" in refused(cli("audit", key_file=tmp_path / "missing.key"), "Unauthenticated")


def test_a_refused_operator_command_is_on_the_audit_trail_with_its_principal(setup):
    cli, _, _ = setup
    refused(cli("cleanup", "--dry-run", key=ANALYST_KEY), "Forbidden")
    refused(cli("reindex", "--dry-run", key=ANALYST_KEY), "Forbidden")
    refused(cli("reindex", "--dry-run"), "Unauthenticated")
    refused(cli("audit", key="SENTINEL-wrong-key-0000"), "Unauthenticated")
    got = [
        (r.actor, r.payload["command"], r.payload["error"])
        for r in audit_trail(cli.engine()).records(event="request_refused")
    ]
    assert got == [
        ("analyst", "rag cleanup", "Forbidden"),
        ("analyst", "rag reindex", "Forbidden"),
        (None, "rag reindex", "Unauthenticated"),
        (None, "rag audit", "Unauthenticated"),
    ]


def test_a_revoked_operator_key_is_refused_without_a_restart(setup):
    cli, ops_file, _ = setup
    assert cli("audit", "--json", key=OPS_KEY).exit_code == 0
    ops_file.write_text("# ops-1's key revoked\n", encoding="utf-8")
    assert "invalid key" in refused(cli("audit", "--json", key=OPS_KEY), "Unauthenticated")
    assert "invalid key" in refused(cli("costs", key=OPS_KEY), "Unauthenticated")


def test_an_approval_is_made_in_the_operator_s_name_never_in_another(setup):
    cli, _, _ = setup
    dry = cli("audit", "purge", "--dry-run", "--json", key=OPS_KEY)
    assert dry.exit_code == 0, dry.stderr
    plan_hash = json.loads(dry.stdout)["inputs_hash"]
    line = refused(
        cli("audit", "purge", "--approved-by", "someone-else", "--reason", "retention", "--json", key=OPS_KEY),
        "Forbidden",
    )
    assert "someone else's name" in line
    refused(cli("cleanup", "--approved-by", "someone-else", "--reason", "r", key=OPS_KEY), "Forbidden")
    refused(cli("reindex", "--approved-by", "someone-else", "--reason", "r", key=OPS_KEY), "Forbidden")
    trail = audit_trail(cli.engine())
    assert trail.records(event="approval_granted") == [] and trail.records(event="approval_refused") == []
    # the operator approves in its own name: --approved-by may be left out, or repeat it
    for extra in ((), ("--approved-by", "ops-1")):
        done = cli("audit", "purge", *extra, "--reason", "retention", "--inputs-hash", plan_hash, "--json", key=OPS_KEY)
        assert done.exit_code == 0, done.stderr
        assert json.loads(done.stdout)["approved_by"] == "ops-1"
    granted = trail.records(event="approval_granted")
    assert [r.actor for r in granted] == ["ops-1", "ops-1"]
    listed = json.loads(cli("audit", "--event", "approval_granted", "--json", key=OPS_KEY).stdout)
    assert {r["actor"] for r in listed["records"]} == {"ops-1"}


def test_with_no_principal_configured_operators_run_as_before_marked_unauthenticated(variant, tmp_path):
    from tests.conftest import _neo4j_uri

    cli = Cli(variant("single-operator"), tmp_path / "ledger.sqlite", _neo4j_uri())
    assert cli("audit", "--json").exit_code == 0 and cli("costs", "--json").exit_code == 0
    plan_hash = json.loads(cli("audit", "purge", "--dry-run", "--json").stdout)["inputs_hash"]
    done = cli("audit", "purge", "--approved-by", "jane", "--reason", "retention", "--inputs-hash", plan_hash, "--json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["approved_by"] == "local:jane"
    (granted,) = json.loads(cli("audit", "--event", "approval_granted", "--json").stdout)["records"]
    assert granted["actor"] == "local:jane"  # a typed name, not an identity: a principal id holds no ':'
    assert "no principal is configured" in refused(cli("audit", key=OPS_KEY), "Unauthenticated")  # no silent pass
    refused(cli("query", "Where do visitors park?", "--role", "public", key=OPS_KEY), "Unauthenticated")


def test_rag_query_with_a_key_runs_as_its_principal(setup, unique):
    cli, _, _ = setup
    engine = cli.engine()
    try:
        ingest_pack(engine, engine.pack(unique), extract=False)
    finally:
        engine.close()
    question = "How quickly must a lost laptop be reported?"
    res = cli("query", question, "--session", "cli-key", "--no-generate", "--json", key=ANALYST_KEY)
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["retrieval"]["role"] == "employee"  # the principal's first role
    assert "may not ask for role" in refused(cli("query", question, "--role", "operator", key=OPS_KEY), "Forbidden")
    refused(cli("query", question, "--role", "regulatory_analyst", key=ANALYST_KEY), "Forbidden")
    refused(cli("query", question, "--role", "public", key="not-a-key"), "Unauthenticated")
    without = cli("query", question, "--role", "employee", "--no-generate", "--json")  # the operator's flag
    assert without.exit_code == 0, without.stderr
    records = json.loads(cli("audit", "--event", "query", "--json", key=OPS_KEY).stdout)["records"]
    by_session = {r["session_id"]: r for r in records}
    assert by_session["cli-key"]["actor"] == "analyst" and by_session["cli-key"]["role"] == "employee"
    assert [r["actor"] for r in records if r["session_id"] is None] == [None]


def test_no_key_is_found_in_outputs_ledger_or_audit(setup, neo4j_driver):
    cli, ops_file, ledger = setup
    cli("audit", "--json", key=OPS_KEY)
    cli("costs", key=ANALYST_KEY)
    cli("audit", "purge", "--approved-by", "someone-else", "--reason", "r", key=OPS_KEY)
    cli("audit", key="SENTINEL-wrong-key-0000")
    ops_file.write_text("", encoding="utf-8")
    cli("audit", key=OPS_KEY)
    stored = read_apart(sorted(ledger.parent.glob("ledger.sqlite*")))  # the file and its -wal
    blob = "\n".join(cli.outputs)
    for key in (OPS_KEY, ANALYST_KEY, "SENTINEL-wrong-key-0000"):
        assert key not in blob and key.encode() not in stored
    assert sha(ANALYST_KEY) not in blob and sha(ANALYST_KEY).encode() not in stored
