"""Approvals given in Dagster run config, by the engine's one rule
(``rag_engine.governance.approvals``): the same approver, hash and audit records as the CLI's.

A run config is stored by Dagster and shown in the UI, so it never holds a key: with principals
configured (``serving.principals``) it names ``key_file``, a file the code server can read holding
the operator's key (as ``rag --key-file``); the approval is then made in that principal's name.
Without principals the typed ``approved_by`` is recorded as ``local:<name>``. Either way the
approval binds the ``inputs_hash`` its dry run printed, and keeps the Dagster run id.

A refusal has an actor and the run id too: the approver when one was bound, else the typed name
marked ``local:<name>`` (it was not authenticated), else what launched the run, from its tags
(``dagster:sensor/<name>``, ``dagster:schedule/<name>``, ``dagster:automation``,
``dagster:backfill/<id>``; a run launched by hand, with nothing typed, is ``local:unnamed``:
Dagster OSS knows no users). A key refused before any approval (``Unauthenticated``,
``Forbidden``) is a ``request_refused`` audit record with that actor and the run id, as the CLI's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path

import dagster as dg

from rag_engine.engine import Engine
from rag_engine.errors import ApprovalRequired, Forbidden, RagError, Unauthenticated
from rag_engine.governance.approvals import Approval, approver_of, operator_approval
from rag_engine.governance.principals import UNAUTHENTICATED_PREFIX, PrincipalRegistry
from rag_engine.governance.principals import approver as marked


class RunApproval(dg.Config):
    """The approval fields of a run config that spends or deletes."""

    approved_by: str = ""
    reason: str = ""
    inputs_hash: str = ""
    """The inputs_hash the dry run (or the refusal) printed: the run proceeds only if it still matches."""
    key_file: str = ""
    """With principals configured: a file holding the operator's key (never the key itself: run
    config is stored and shown)."""


def _key(config: RunApproval) -> str | None:
    if not config.key_file.strip():
        return None
    try:
        key = Path(config.key_file).expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise Unauthenticated(f"key_file {config.key_file}: cannot be read ({type(exc).__name__})") from None
    if not key:
        raise Unauthenticated(f"key_file {config.key_file}: the file is empty")
    return key


UNNAMED = UNAUTHENTICATED_PREFIX + "unnamed"
"""The actor of a run launched by hand with no name in its config: someone at the UI or `dg`."""


def launched_by(tags: Mapping[str, str]) -> str:
    """Who launched a run, from Dagster's own tags: a sensor, a schedule, automation, a backfill, or
    (none of them) a person nobody authenticated, ``local:unnamed``."""
    if tags.get("dagster/from_automation_condition") == "true" or tags.get("dagster/auto_materialize") == "true":
        return "dagster:automation"
    for tag, kind in (("dagster/sensor_name", "sensor"), ("dagster/schedule_name", "schedule")):
        if tags.get(tag):
            return f"dagster:{kind}/{tags[tag]}"
    if tags.get("dagster/backfill"):
        return f"dagster:backfill/{tags['dagster/backfill']}"
    return UNNAMED


def run_approval(
    engine: Engine,
    config: RunApproval,
    *,
    action: str,
    run_id: str,
    command: str,
    tags: Mapping[str, str] | None = None,
) -> tuple[Approval | None, str]:
    """(the approval the run config gives, or None when it gives none; who asked, for the audit
    record of a refusal: never None, see the module docstring). Raises before anything changes when
    the key is missing or wrong (with principals configured; recorded as ``request_refused``); an
    approval without the dry run's inputs hash is no approval."""
    given = bool(config.approved_by.strip() or config.key_file.strip())
    if not given:
        return None, launched_by(tags or {})
    try:
        approver = approver_of(engine.cfg, engine.root, engine.env, _key(config), config.approved_by, command)
    except (Unauthenticated, Forbidden) as exc:
        _record_refusal(engine, command, exc, _refused_actor(engine, config, tags or {}), run_id)
        raise
    try:
        approval = operator_approval(
            action, approved_by=approver, reason=config.reason, inputs_hash=config.inputs_hash, run_id=run_id
        )
    except ApprovalRequired:  # no dry-run hash: refused (and recorded) as no approval at all
        return None, approver
    return approval, approver


def _refused_actor(engine: Engine, config: RunApproval, tags: Mapping[str, str]) -> str:
    """Who asked, for a refused key: the key's principal when the key is valid (``Forbidden``: no
    operator role, or another's name typed), else the typed name marked ``local:`` (nothing
    authenticated it), else what launched the run."""
    try:
        key = _key(config)
        if key and engine.cfg.serving.principals:
            return PrincipalRegistry(engine.cfg, engine.root, engine.env).authenticate(key).id
    except RagError:  # a bad key (or key file): nothing is proven about who typed it
        pass
    claimed = config.approved_by.strip()
    return marked(None, claimed) if claimed else launched_by(tags)


def _record_refusal(engine: Engine, command: str, exc: Exception, actor: str, run_id: str) -> None:
    """A refused key on the audit trail, as the CLI records its refusals (``request_refused``): the
    actor, the command, the error type and the run id; never the key. A trail that cannot be
    written leaves the refusal as it is."""
    from rag_engine.governance.audit import AuditRecord, audit_trail

    record = AuditRecord(
        event="request_refused",
        actor=actor,
        payload={"command": command, "error": type(exc).__name__, "via": "dagster", "run_id": run_id},
    )
    with contextlib.suppress(Exception):
        audit_trail(engine).append(record)
