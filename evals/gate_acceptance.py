"""Acceptance of a gate regression: read the acceptance file, judge it against the two reports,
record it in the audit trail.

An acceptance (``evals.gate_models.Acceptance``) is the one approval type
``accept_gate_regression`` (``rag_engine.governance.approvals``), bound to the sha256 of both
report files; ``evals.gates`` applies a matched one to a waivable regression. Who accepted is
bound by the engine's one approval rule (``bind_acceptance``): with principals configured, only the
operator whose key runs the gate; without, the typed name marked ``local:<name>``. Imports
``evals.gate_models`` only, of the gate's modules (see its docstring for the layout).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from evals.gate_models import Acceptance, AcceptanceOutcome, acceptance_inputs
from rag_engine import yaml_safe
from rag_engine.errors import ApprovalError, EvalInputError, Forbidden, Unauthenticated
from rag_engine.governance.approvals import ACCEPT_GATE_REGRESSION, approver_of, require


def load_acceptance(path: str | Path) -> dict[str, Any]:
    """Decode an acceptance file (JSON or YAML); EvalInputError when missing or malformed."""
    path = Path(path)
    if not path.is_file():
        raise EvalInputError(f"acceptance file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml_safe.load(text, source=path)
    except (UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
        raise EvalInputError(f"{path}: acceptance is not valid JSON/YAML: {exc}") from None
    if not isinstance(data, dict):
        raise EvalInputError(f"{path}: an acceptance must be a mapping of keys to values")
    return data


KEY_ENV = "RAG_KEY"
"""Where the person running the gate with an acceptance puts the operator's key (as for `rag`)."""


def bind_acceptance(
    engine_cfg: Any, root: Path, env: Mapping[str, str], raw: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, str | None]:
    """(the acceptance with ``accepted_by`` as the approval rule records it, or None; the reason it
    cannot apply, or None). The same rule as every other approval
    (``governance.approvals.approver_of``): with principals configured, the operator's key in
    ``RAG_KEY`` must be given and ``accepted_by`` may only name its principal; without, the typed
    name is recorded as ``local:<name>``. A refused one is reported and ignored by the gate."""
    if raw is None or not isinstance(raw, dict):
        return raw, None
    claimed = str(raw.get("accepted_by") or "")
    try:
        bound = approver_of(engine_cfg, root, env, env.get(KEY_ENV) or None, claimed, "accepting a gate regression")
    except (Unauthenticated, Forbidden) as exc:
        return None, f"acceptance refused: {type(exc).__name__}: {exc}"
    return {**raw, "accepted_by": bound}, None


def judge_acceptance(
    raw: dict[str, Any] | None,
    *,
    source: str | None,
    error: str | None,
    candidate_sha: str | None,
    baseline_sha: str | None,
) -> AcceptanceOutcome | None:
    if raw is None and error is None:
        return None
    if error is not None:
        return AcceptanceOutcome(source=source, matched=False, applied=False, problems=(error,))
    if not isinstance(raw, dict):
        return AcceptanceOutcome(
            source=source,
            matched=False,
            applied=False,
            problems=(f"an acceptance must be a mapping, got {type(raw).__name__}",),
        )
    try:
        acc = Acceptance.model_validate(raw)
    except ValidationError as exc:
        invalid = tuple(
            f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: "
            f"{'unknown key' if e['type'] == 'extra_forbidden' else e['msg']}"
            for e in exc.errors()
        )
        return AcceptanceOutcome(source=source, matched=False, applied=False, problems=invalid)
    problems: list[str] = []
    if acc.baseline_sha256 != baseline_sha:
        problems.append(
            f"baseline_sha256 {acc.baseline_sha256[:12]} does not match the baseline report "
            f"({(baseline_sha or 'unknown')[:12]})"
        )
    if acc.candidate_sha256 != candidate_sha:
        problems.append(
            f"candidate_sha256 {acc.candidate_sha256[:12]} does not match the candidate report "
            f"({(candidate_sha or 'unknown')[:12]})"
        )
    if not problems:  # the one approval path: an acceptance is an Approval of accept_gate_regression
        try:
            require(acc.as_approval(), ACCEPT_GATE_REGRESSION, acceptance_inputs(baseline_sha, candidate_sha))
        except ApprovalError as exc:
            problems.append(str(exc))
    return AcceptanceOutcome(
        source=source, **acc.model_dump(), matched=not problems, applied=False, problems=tuple(problems)
    )


def audit_acceptance(
    engine_cfg: Any, raw: Any, base_sha: str | None, cand_sha: str | None, *, outcome: AcceptanceOutcome | None
) -> None:
    """Write the acceptance to the audit trail (the ledger database) as an approval check:
    ``approval_granted`` when it was applied, ``approval_refused`` when it does not bind these
    reports; nothing when it matched but had no regression to waive."""
    if outcome is None or (outcome.matched and not outcome.applied):
        return
    import os

    from rag_engine.governance.audit import AuditTrail
    from rag_engine.providers.ledger import ledger_url

    try:
        acc = Acceptance.model_validate(raw)
    except ValidationError:
        return  # not an approval at all: reported under acceptance.problems
    trail = AuditTrail(ledger_url(engine_cfg, os.environ, Path(__file__).resolve().parents[1]))
    try:
        inputs = acceptance_inputs(base_sha, cand_sha)
        # refused: recorded, and the gate reports it under acceptance.problems
        with contextlib.suppress(ApprovalError):
            require(acc.as_approval(), ACCEPT_GATE_REGRESSION, inputs, audit=trail)
    finally:
        trail.dispose()
