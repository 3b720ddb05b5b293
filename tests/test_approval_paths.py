"""One approval rule for every path that spends or deletes: Dagster's graph_cleanup run config and a
gate acceptance need the operator's key when principals are configured and the dry run's inputs
hash always, and are recorded like the CLI's (``local:<name>`` without principals, the run id kept).
Real Neo4j, real Dagster (in process), the test's own SQLite ledger."""

from __future__ import annotations

import hashlib

import dagster as dg
import pytest
import yaml

from evals import gates
from evals.report import dump_report
from rag_assets.definitions import build_definitions
from rag_engine.errors import ApprovalRequired
from rag_engine.governance import approvals
from rag_engine.governance.audit import audit_trail
from tests.test_gates import make_report, worse

OPS_KEY = "SENTINEL-ops-key-0a1b2c3d4e5f60718293a4b5c6d7e8f9"


def _sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _principals(ops_file):
    def edit(text: str) -> str:
        cfg = yaml.safe_load(text)
        cfg["serving"] = {
            "principals": [{"id": "ops-1", "roles": ["operator", "employee"], "key_sha256_file": str(ops_file)}]
        }
        return yaml.safe_dump(cfg, sort_keys=False)

    return edit


def _orphans(engine, pack: str) -> int:
    rows = engine.driver.execute_query(
        "MATCH (e:Entity {pack: $p}) WHERE NOT (e)-[:MENTIONED_IN]->() RETURN count(e) AS n", p=pack
    ).records
    return int(rows[0]["n"])


def _failure(run) -> str:
    """The step failure's one line (a ``dg.Failure``'s description)."""
    event = next(e for e in run.all_events if e.is_step_failure)
    data = event.event_specific_data
    return data.user_failure_data.description if data.user_failure_data else data.error.message


def test_dagster_graph_cleanup_binds_the_operator_key_and_the_dry_run_hash(variant, unique, tmp_path):
    ops_file = tmp_path / "ops.sha256"
    ops_file.write_text(_sha(OPS_KEY) + "\n")
    key_file = tmp_path / "ops.key"
    key_file.write_text(OPS_KEY + "\n")
    defs = build_definitions(variant("principals", edit=_principals(ops_file)))
    engine = defs.resources["rag"].engine()
    engine.driver.execute_query(
        "CREATE (:Entity {entity_id: $p + '-orphan', name: 'Ghost', normalized_name: 'ghost', pack: $p})", p=unique
    )
    job = defs.resolve_job_def("graph_cleanup")
    instance = dg.DagsterInstance.ephemeral()

    def run(config: dict):
        return job.execute_in_process(
            instance=instance, raise_on_error=False, run_config={"ops": {"cleanup_stale_paths": {"config": config}}}
        )

    dry = run({"dry_run": True})
    digest = dry.output_for_node("cleanup_stale_paths")["inputs_hash"]
    # a typed name with no key (the finding): refused before anything is deleted
    typed = run({"approved_by": "ops", "reason": "r", "inputs_hash": digest})
    assert not typed.success and "Unauthenticated" in _failure(typed)
    # the key of the operator, approving in another's name: refused
    other = run({"approved_by": "someone", "reason": "r", "inputs_hash": digest, "key_file": str(key_file)})
    assert not other.success and "Forbidden" in _failure(other)
    # the key but no dry-run hash: refused, recorded with the operator as actor
    unbound = run({"reason": "r", "key_file": str(key_file)})
    assert not unbound.success and _orphans(engine, unique) == 1
    trail = audit_trail(engine)
    refused = [r for r in trail.records(event="approval_refused") if r.payload.get("action") == "graph_cleanup"]
    assert refused and refused[-1].actor == "ops-1"
    done = run({"reason": "r", "inputs_hash": digest, "key_file": str(key_file)})
    assert done.success, _failure(done)
    assert _orphans(engine, unique) == 0
    (granted,) = [r for r in trail.records(event="approval_granted") if r.payload.get("run_id") == done.run_id]
    assert granted.actor == "ops-1" and granted.payload["inputs_hash"] == digest
    assert OPS_KEY not in str(granted.payload)


def test_an_approval_without_the_dry_run_hash_approves_nothing():
    with pytest.raises(ApprovalRequired):
        approvals.operator_approval(approvals.GRAPH_CLEANUP, approved_by="local:jane", reason="r", inputs_hash=None)
    assert approvals.operator_approval(approvals.GRAPH_CLEANUP, approved_by="", reason="", inputs_hash=None) is None


def test_a_gate_acceptance_needs_the_operator_key_when_principals_are_configured(
    variant, tmp_path, monkeypatch, neo4j_driver
):
    ops_file = tmp_path / "ops.sha256"
    ops_file.write_text(_sha(OPS_KEY) + "\n")
    config = variant("gate-principals", edit=_principals(ops_file))
    candidate, baseline = make_report(rank_of=worse), make_report()
    cand = dump_report(candidate, tmp_path / "c.json")
    base = dump_report(baseline, tmp_path / "b.json")
    accept = tmp_path / "accept.yaml"
    accept.write_text(
        yaml.safe_dump(
            {
                "baseline_sha256": hashlib.sha256(base.read_bytes()).hexdigest(),
                "candidate_sha256": hashlib.sha256(cand.read_bytes()).hexdigest(),
                "reason": "r",
                "accepted_by": "jane",
            }
        )
    )
    monkeypatch.setenv("RAG_LEDGER_URL", f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    monkeypatch.delenv("RAG_KEY", raising=False)
    typed = gates.run(config, str(cand), str(base), str(tmp_path / "g1.json"), str(accept))
    assert typed.status == "regression" and typed.acceptance is not None and not typed.acceptance.applied
    assert any("Unauthenticated" in p for p in typed.acceptance.problems)
    monkeypatch.setenv("RAG_KEY", OPS_KEY)
    other = gates.run(config, str(cand), str(base), str(tmp_path / "g2.json"), str(accept))
    assert other.status == "regression" and any("Forbidden" in p for p in other.acceptance.problems)
    accept.write_text(accept.read_text().replace("accepted_by: jane", "accepted_by: ops-1"))
    done = gates.run(config, str(cand), str(base), str(tmp_path / "g3.json"), str(accept))
    assert done.status == "accepted" and done.acceptance.accepted_by == "ops-1"


def _priced_extraction(text: str) -> str:
    """demo-chat (replay) priced like gpt-4o-mini: extraction becomes paid work above the limit (0)."""
    block = (
        "    served_model: fixture-demo-replay\n"
        "    context_limit: 128000\n"
        "    capabilities: [generation, structured_output]\n"
    )
    assert block in text
    return text.replace(block, block + "    pricing_ref: gpt-4o-mini\n")


def test_rag_ingest_asks_the_same_approval_as_dagster_before_paid_extraction(variant, tmp_path):
    """The finding: paid extraction through `rag ingest` ran 16 calls with no approval while the
    same work in Dagster waited for one."""
    import json

    from tests.conftest import _embed_env, _neo4j_uri
    from tests.support.cli import rag

    config = variant("paid-ingest", edit=_priced_extraction)
    env = {"RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}", "NEO4J_URI": _neo4j_uri(), **_embed_env()}
    refused = rag("--config", config, "ingest", "--json", env=env)
    assert refused.exit_code == 2, refused.output
    assert json.loads(refused.stdout)["error"]["type"] == "ApprovalRequired"
    calls = [r for r in _ledger(tmp_path) if r.purpose == "graph_extraction"]
    assert calls == []  # refused before any model call
    est = json.loads(rag("--config", config, "ingest", "--estimate", "--json", env=env).stdout)
    assert est["approval_needed"] and len(est["inputs_hash"]) == 64
    (paid,) = est["paid"].values()
    assert paid["calls"] > 0 and paid["cost_usd"] > 0
    done = rag(
        "--config", config, "ingest", "--approved-by", "jane", "--reason", "new docs",
        "--inputs-hash", est["inputs_hash"], "--json", env=env,
    )  # fmt: skip
    assert done.exit_code in (0, 1), done.output  # 1: an extraction call of the replay may fail; it ran
    assert [r for r in _ledger(tmp_path) if r.purpose == "graph_extraction"]
    events = json.loads(rag("--config", config, "audit", "--event", "approval_granted", "--json", env=env).stdout)
    (granted,) = [r for r in events["records"] if r["payload"].get("action") == "paid_automation"]
    assert granted["actor"] == "local:jane"


def _ledger(tmp_path):
    from rag_engine.providers.ledger import UsageLedger

    led = UsageLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    try:
        return led.records()
    finally:
        led.dispose()


def test_dagster_paid_extraction_binds_the_operator_key_and_the_dry_run_hash(variant, unique, tmp_path):
    """With principals configured, a Dagster run of paid extraction above the limit is refused for
    a typed name with no key, for the key without the dry run's hash and for the key with another
    hash, each before any model call; the key with the hash runs it, approved in the key's
    principal's name (``approval_granted``, the run id kept)."""
    from tests.test_dagster_automation import RANGE, Automation, _calls, _ingest_new_documents_paid, _priced_chat

    ops_file = tmp_path / "ops.sha256"
    ops_file.write_text(_sha(OPS_KEY) + "\n")
    key_file = tmp_path / "ops.key"
    key_file.write_text(OPS_KEY + "\n")
    defs = build_definitions(variant("paid-principals", edit=lambda t: _principals(ops_file)(_priced_chat(t))))
    auto = Automation(unique)
    _ingest_new_documents_paid(auto, defs)  # free steps ran; extraction awaits approval
    key = dg.AssetKey([unique, "llm_extraction"])
    parts = list(auto.instance.get_dynamic_partitions(auto.parts))
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection={key})
    tags = {RANGE[0]: parts[0], RANGE[1]: parts[-1]}
    trail = audit_trail(defs.resources["rag"].engine())

    def run(config: dict | None):
        run_config = {"ops": {f"{unique}__llm_extraction": {"config": config}}} if config else None
        return job.execute_in_process(instance=auto.instance, raise_on_error=False, tags=tags, run_config=run_config)

    calls = _calls(defs)
    dry = run(None)  # the refusal is the dry run: it names the hash an approval must bind
    assert not dry.success
    failure = next(e for e in dry.all_events if e.is_step_failure).event_specific_data.user_failure_data
    digest = failure.metadata["inputs_hash"].value
    assert len(digest) == 64
    for config, error in (
        ({"approved_by": "ops", "reason": "r", "inputs_hash": digest}, "Unauthenticated"),  # typed, no key
        ({"reason": "r", "key_file": str(key_file)}, "awaiting approval"),  # the key, no dry-run hash: none
        ({"reason": "r", "inputs_hash": "0" * 64, "key_file": str(key_file)}, "binds inputs 000000000000"),  # another
    ):
        refused = run(config)
        assert not refused.success and error in _failure(refused), (config.keys(), _failure(refused))
        assert _calls(defs) == calls  # refused before any model call
    done = run({"reason": "new policy documents", "inputs_hash": digest, "key_file": str(key_file)})
    assert done.success, _failure(done)
    assert _calls(defs) > calls
    (granted,) = [r for r in trail.records(event="approval_granted") if r.payload.get("run_id") == done.run_id]
    assert granted.actor == "ops-1" and granted.payload["action"] == "paid_automation"
    assert granted.payload["inputs_hash"] == digest and OPS_KEY not in str(granted.payload)
