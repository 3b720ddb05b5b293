"""One approval path for every mutating operator action.

An approval says who decided, why, when, and *what exactly*: the sha256 of the action's canonical
inputs (a cleanup plan, the two report hashes of a gate acceptance, an audit deletion cut-off and
count). ``require`` is called before anything changes; a missing approval, one for another action,
or one bound to other inputs raises a typed error, so an operator who approved a dry run never
approves what the data became afterwards. Every check, granted or refused, is written to the
audit trail when one is given. Read-only operations never need an approval.

The one rule, for every path that spends or deletes (the CLI, Dagster run config, MCP approval
requests, gate acceptances, ``rag ingest`` above the paid limit): who approves is decided by
``approver_of`` (with principals configured: the operator whose key was given, a typed name other
than it refused; without: the typed name as ``local:<name>``), and what is approved is the inputs
hash a dry run printed (``operator_approval``: no hash, no approval). ``require`` then checks the
hash against the inputs as they are now and writes ``approval_granted`` / ``approval_refused``
with the approver (or, refused before there was an approval, the authenticated actor) and the
Dagster run id when there is one.

Known actions (any string works; these are the ones the engine uses):
``graph_cleanup``, ``accept_gate_regression``, ``delete_audit_records``, ``reindex_cutover``,
``paid_automation``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rag_engine.errors import ApprovalMismatch, ApprovalRequired, Unauthenticated

if TYPE_CHECKING:
    from rag_engine.config import EngineConfig

GRAPH_CLEANUP = "graph_cleanup"
ACCEPT_GATE_REGRESSION = "accept_gate_regression"
DELETE_AUDIT_RECORDS = "delete_audit_records"
REINDEX_CUTOVER = "reindex_cutover"
PAID_AUTOMATION = "paid_automation"


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(_plain(v) for v in value)
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, BaseModel):
        return _plain(value.model_dump(mode="json"))
    return value


def canonical(inputs: Mapping[str, Any]) -> str:
    """The inputs as canonical JSON: sorted keys, no whitespace, sets sorted, dates ISO."""
    return json.dumps(_plain(inputs), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def inputs_hash(inputs: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical(inputs).encode("utf-8")).hexdigest()


class Approval(BaseModel):
    """A person's decision to run one action on exactly these inputs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    approved_by: str
    reason: str
    action: str
    inputs_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    run_id: str | None = None
    """The Dagster run (or CLI run) the approval was given for, kept in its audit record."""

    @field_validator("approved_by", "reason", "action")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v or not v.strip():
            raise ValueError("must not be blank")
        return v.strip()

    @field_validator("inputs_hash", mode="before")
    @classmethod
    def _lower(cls, v: Any) -> Any:
        return v.strip().lower() if isinstance(v, str) else v

    @classmethod
    def given(
        cls, *, approved_by: str, reason: str, action: str, inputs_hash: str, run_id: str | None = None
    ) -> Approval:
        """An approval as an operator typed it (``--approved-by``, ``--reason``, ``--inputs-hash``):
        a malformed one is refused as ``ApprovalMismatch`` naming the field, nothing changed."""
        try:
            return cls(approved_by=approved_by, reason=reason, action=action, inputs_hash=inputs_hash, run_id=run_id)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: "
                + ("the full 64-hex sha256 the dry run printed" if e["loc"] == ("inputs_hash",) else e["msg"])
                for e in exc.errors()
            )
            raise ApprovalMismatch(f"the {action} approval is malformed ({problems}); nothing was changed") from None

    @classmethod
    def grant(
        cls, action: str, inputs: Mapping[str, Any], *, approved_by: str, reason: str, at: datetime | None = None
    ) -> Approval:
        """An approval bound to ``inputs`` as they are now (e.g. the plan a dry run just showed)."""
        extra: dict[str, Any] = {"at": at} if at is not None else {}
        return cls(approved_by=approved_by, reason=reason, action=action, inputs_hash=inputs_hash(inputs), **extra)


def approver_of(
    cfg: EngineConfig, root: Path, env: Mapping[str, str], key: str | None, claimed: str, command: str
) -> str:
    """Who an approval is made by, the same on every path: with principals configured
    (``serving.principals``), the principal of ``key`` if it holds the operator role
    (``Unauthenticated`` for no key or a bad one, ``Forbidden`` otherwise, or for a ``claimed``
    name other than it); without, the claimed name as ``local:<name>`` (a key is then refused:
    nothing could check it). ``command`` names what was asked, in the refusal."""
    from rag_engine.governance.principals import PrincipalRegistry, approver

    if not cfg.serving.principals:
        if key:
            raise Unauthenticated(
                f"{command}: a key was given but no principal is configured (serving.principals): "
                "there is nothing to check it against"
            )
        return approver(None, claimed)
    if not key:
        raise Unauthenticated(f"{command} needs an operator's key: principals are configured (serving.principals)")
    return approver(PrincipalRegistry(cfg, root, env).operator(key, command), claimed)


def operator_approval(
    action: str, *, approved_by: str, reason: str, inputs_hash: str | None, run_id: str | None = None
) -> Approval | None:
    """The approval an operator gave (``approved_by`` already bound by ``approver_of``), or None
    when none was given (``require`` then refuses it and records the refusal). One was given but
    without the inputs hash of a dry run: ``ApprovalRequired`` (an approval of "whatever the plan
    is now" approves nothing anyone saw)."""
    if not (approved_by or reason):
        return None
    hashed = bool((inputs_hash or "").strip())
    # a blank or malformed field is refused as such first (ApprovalMismatch naming it)
    approval = Approval.given(
        approved_by=approved_by, reason=reason, action=action, inputs_hash=(inputs_hash or "") if hashed else "0" * 64
    )
    if not hashed:
        raise ApprovalRequired(
            f"{action}: an approval must bind the inputs hash its dry run printed (inputs_hash / "
            "--inputs-hash); nothing was changed"
        )
    return approval.model_copy(update={"run_id": run_id})


class ApprovalRecorder(Protocol):
    """Where ``require`` writes each check's outcome: the audit trail (``governance.audit``),
    which depends on this module, never the reverse."""

    def record_approval(
        self,
        *,
        action: str,
        approval: Approval | None,
        expected_hash: str,
        refused: str | None,
        session_id: str | None = None,
        actor: str | None = None,
        run_id: str | None = None,
    ) -> object: ...


def require(
    approval: Approval | None,
    action: str,
    inputs: Mapping[str, Any],
    *,
    audit: ApprovalRecorder | None = None,
    session_id: str | None = None,
    unchanged: str = "nothing was changed",
    actor: str | None = None,
    run_id: str | None = None,
) -> None:
    """Raise unless ``approval`` approves ``action`` on exactly ``inputs``; call it before any change.

    ``ApprovalRequired`` for no approval, ``ApprovalMismatch`` for another action or other inputs.
    With ``audit`` the outcome is appended to the trail (``approval_granted`` / ``approval_refused``).
    ``unchanged``: what the refusal leaves as it was, said in the error (an action that prepared
    something before its approved step says what it prepared). ``actor``: who asked, recorded on a
    refusal that has no approval to name them (the authenticated operator, ``local:<name>``);
    ``run_id``: the Dagster (or CLI) run it was asked for, recorded on a refusal too."""
    expected = inputs_hash(inputs)
    error: Exception | None = None
    if approval is None:
        error = ApprovalRequired(
            f"{action} changes state and needs an approval (approved_by, reason) bound to its "
            f"inputs, sha256 {expected}; {unchanged}",
            inputs_hash=expected,
        )
    elif approval.action != action:
        error = ApprovalMismatch(
            f"the approval is for {approval.action!r}, not {action!r}; {unchanged}", inputs_hash=expected
        )
    elif approval.inputs_hash != expected:
        error = ApprovalMismatch(
            f"the approval by {approval.approved_by} binds inputs {approval.inputs_hash[:12]} but "
            f"{action} would act on inputs {expected[:12]} (they changed since it was approved, "
            f"or another plan was approved); {unchanged}: re-approve the current plan",
            inputs_hash=expected,
        )
    if audit is not None:
        audit.record_approval(
            action=action,
            approval=approval,
            expected_hash=expected,
            session_id=session_id,
            refused=None if error is None else f"{type(error).__name__}: {error}",
            actor=actor,
            run_id=run_id,
        )
    if error is not None:
        raise error
