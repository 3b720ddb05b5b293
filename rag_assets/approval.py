"""Approvals given in Dagster run config, by the engine's one rule
(``rag_engine.governance.approvals``): the same approver, hash and audit records as the CLI's.

A run config is stored by Dagster and shown in the UI, so it never holds a key: with principals
configured (``serving.principals``) it names ``key_file``, a file the code server can read holding
the operator's key (as ``rag --key-file``); the approval is then made in that principal's name.
Without principals the typed ``approved_by`` is recorded as ``local:<name>``. Either way the
approval binds the ``inputs_hash`` its dry run printed, and keeps the Dagster run id.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from rag_engine.engine import Engine
from rag_engine.errors import ApprovalRequired, Unauthenticated
from rag_engine.governance.approvals import Approval, approver_of, operator_approval


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


def run_approval(
    engine: Engine, config: RunApproval, *, action: str, run_id: str, command: str
) -> tuple[Approval | None, str | None]:
    """(the approval the run config gives, or None when it gives none; who asked, for the audit
    record of a refusal). Raises before anything changes when the key is missing or wrong (with
    principals configured); an approval without the dry run's inputs hash is no approval."""
    given = bool(config.approved_by.strip() or config.key_file.strip())
    if not given:
        return None, None
    approver = approver_of(engine.cfg, engine.root, engine.env, _key(config), config.approved_by, command)
    try:
        approval = operator_approval(
            action, approved_by=approver, reason=config.reason, inputs_hash=config.inputs_hash, run_id=run_id
        )
    except ApprovalRequired:  # no dry-run hash: refused (and recorded) as no approval at all
        return None, approver
    return approval, approver
