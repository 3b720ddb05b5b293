"""Approvals given in Dagster run config are audited like the CLI's (Dagster operations round two,
item 8): the typed name marked ``local:`` (not authenticated), the Dagster run id kept, and every
refusal names an actor (a run without an approval had none, and a refused key left no record)."""

from __future__ import annotations

import dagster as dg

from rag_assets.approval import launched_by
from rag_assets.definitions import build_definitions
from rag_engine.governance.audit import audit_trail
from tests.test_approval_paths import OPS_KEY, _principals, _sha


def _cleanup(defs: dg.Definitions, instance: dg.DagsterInstance, config: dict, tags: dict | None = None):
    return defs.resolve_job_def("graph_cleanup").execute_in_process(
        instance=instance,
        raise_on_error=False,
        run_config={"ops": {"cleanup_stale_paths": {"config": config}}},
        tags=tags,
    )


def _records(engine, event: str, run_id: str) -> list:
    return [r for r in audit_trail(engine).records(event=event) if r.payload.get("run_id") == run_id]


def test_dagster_refusals_and_approvals_carry_an_actor_and_the_run_id(variant, unique):
    defs = build_definitions(variant("audit-local"))
    engine = defs.resources["rag"].engine()
    instance = dg.DagsterInstance.ephemeral()

    # a run launched by hand with no approval at all: refused, by someone nobody named
    bare = _cleanup(defs, instance, {})
    assert not bare.success
    (refused,) = _records(engine, "approval_refused", bare.run_id)
    assert refused.actor == "local:unnamed" and refused.payload["action"] == "graph_cleanup"

    # the same, launched by a sensor: the sensor is who asked
    sensed = _cleanup(defs, instance, {}, tags={"dagster/sensor_name": "some_sensor"})
    (refused,) = _records(engine, "approval_refused", sensed.run_id)
    assert refused.actor == "dagster:sensor/some_sensor"

    # a typed name without the dry run's hash: refused in that name, marked unauthenticated
    unbound = _cleanup(defs, instance, {"approved_by": "jane", "reason": "r"})
    (refused,) = _records(engine, "approval_refused", unbound.run_id)
    assert refused.actor == "local:jane"

    # approved: the typed name marked local:, the run id kept
    digest = _cleanup(defs, instance, {"dry_run": True}).output_for_node("cleanup_stale_paths")["inputs_hash"]
    done = _cleanup(defs, instance, {"approved_by": "jane", "reason": "tidy", "inputs_hash": digest})
    assert done.success
    (granted,) = _records(engine, "approval_granted", done.run_id)
    assert granted.actor == "local:jane" and granted.payload["approved_by"] == "local:jane"


def test_a_refused_key_in_dagster_is_a_request_refused_record_with_an_actor(variant, tmp_path):
    ops_file = tmp_path / "ops.sha256"
    ops_file.write_text(_sha(OPS_KEY) + "\n")
    defs = build_definitions(variant("audit-keys", edit=_principals(ops_file)))
    engine = defs.resources["rag"].engine()
    instance = dg.DagsterInstance.ephemeral()
    typed = _cleanup(defs, instance, {"approved_by": "ops", "reason": "r", "inputs_hash": "0" * 64})
    assert not typed.success
    (refused,) = _records(engine, "request_refused", typed.run_id)
    assert refused.actor == "local:ops"  # the typed name, not authenticated by anything
    assert refused.payload["error"] == "Unauthenticated" and refused.payload["via"] == "dagster"

    bad_key = tmp_path / "bad.key"
    bad_key.write_text("not-the-key\n")
    wrong = _cleanup(defs, instance, {"reason": "r", "inputs_hash": "0" * 64, "key_file": str(bad_key)})
    (refused,) = _records(engine, "request_refused", wrong.run_id)
    assert refused.actor == "local:unnamed" and OPS_KEY not in str(refused.payload)

    good_key = tmp_path / "ops.key"
    good_key.write_text(OPS_KEY + "\n")
    other = _cleanup(defs, instance, {"approved_by": "mallory", "reason": "r", "key_file": str(good_key)})
    (refused,) = _records(engine, "request_refused", other.run_id)
    assert refused.actor == "ops-1" and refused.payload["error"] == "Forbidden"  # the key's principal


def test_launched_by_reads_the_runs_own_tags():
    assert launched_by({}) == "local:unnamed"
    assert launched_by({"dagster/from_automation_condition": "true", "dagster/sensor_name": "rag_automation"}) == (
        "dagster:automation"
    )
    assert launched_by({"dagster/schedule_name": "nightly"}) == "dagster:schedule/nightly"
    assert launched_by({"dagster/backfill": "abc"}) == "dagster:backfill/abc"
