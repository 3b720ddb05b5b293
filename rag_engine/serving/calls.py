"""What the query service and the MCP server do for a principal: blocking calls, one per request,
each run in the service's bounded pool (``serving.limits``). The HTTP routes and the MCP tools are
two thin skins over these, so both enforce the same gate, audit the same way and return the same
shapes (``RetrievalResult`` and ``QueryOutcome`` are what `rag query --json` prints).

Reads (retrieve, query, a passage, the collections) run under a role the principal holds.
Actions that change state never run here: ``approval_request`` computes the action's plan and the
sha256 its approval must bind, and returns them for a person to approve through the operator
path (`rag graph cleanup` / `rag audit purge` with ``--inputs-hash``), so an agent can ask for an
action but never carry it out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from rag_engine.engine import Engine
from rag_engine.governance import approvals
from rag_engine.governance.audit import AuditRecord, audit_trail
from rag_engine.governance.policy import gate
from rag_engine.governance.principals import Principal
from rag_engine.graph.cleanup import cleanup_inputs
from rag_engine.retrieval.candidates import RetrievalResult
from rag_engine.retrieval.conversation import Turn
from rag_engine.retrieval.outcome import QueryOutcome
from rag_engine.retrieval.query import run_query
from rag_engine.serving.metrics import observe_events
from rag_engine.store import reads
from rag_engine.store.session import read_transaction

Action = Literal["graph_cleanup", "delete_audit_records"]


class Passage(BaseModel):
    """One cited passage as the store holds it now (current version, permitted collection)."""

    model_config = ConfigDict(frozen=True)

    chunk_id: str
    doc_id: str
    doc_version: str | None = None
    anchor: str
    heading: str
    collection: str
    text: str


class RoleCollections(BaseModel):
    role: str
    collections: tuple[str, ...]


class ApprovalRequest(BaseModel):
    """What an action would do and what a person must approve: nothing has changed."""

    action: str
    requested_by: str
    inputs: dict[str, Any]
    inputs_hash: str
    approve_with: str
    """The operator command that carries it out once a person approves exactly these inputs: run
    with that person's operator key, so the approval is made in their name, never the agent's."""
    status: Literal["awaiting_approval"] = "awaiting_approval"


def retrieve(
    engine: Engine, caller: Principal, question: str, role: str | None, k: int | None, collections: list[str] | None
) -> RetrievalResult:
    """Ranked candidates with provenance, no answer: a query without generation, audited as one."""
    outcome = run_query(
        engine, question, caller.role(role), k=k, generate=False, collections=collections, actor=caller.id
    )
    observe_events(outcome.events)
    return outcome.retrieval


def query(
    engine: Engine,
    caller: Principal,
    question: str,
    role: str | None,
    *,
    k: int | None = None,
    collections: list[str] | None = None,
    session_id: str | None = None,
    generate: bool = True,
    conversation: list[Turn] | list[dict[str, Any]] | None = None,
    on_retrieved: Callable[[RetrievalResult], None] | None = None,
) -> QueryOutcome:
    """A cited answer; ``conversation``: the earlier turns of a chat, checked and budgeted by the
    engine (``retrieval.conversation``)."""
    outcome = run_query(
        engine,
        question,
        caller.role(role),
        k=k,
        generate=generate,
        session_id=session_id,
        collections=collections,
        conversation=conversation,
        actor=caller.id,
        on_retrieved=on_retrieved,
    )
    observe_events(outcome.events)
    return outcome


def passage(engine: Engine, caller: Principal, chunk_id: str, role: str | None) -> Passage | None:
    """The current text of one chunk if the role may read its collection, else ``None`` (the same
    answer as for a chunk that does not exist, so a caller cannot probe what it may not read)."""
    decision = gate(engine.cfg, caller.role(role))
    with read_transaction(engine.driver, engine.database, packs=engine.packs) as rx:
        rows = reads.chunks_by_id(rx, [chunk_id], decision.collections)
    return Passage.model_validate(rows[0]) if rows else None


def readable(engine: Engine, caller: Principal) -> list[RoleCollections]:
    """Per role the principal holds, the collections it may read (no store query)."""
    return [RoleCollections(role=r, collections=gate(engine.cfg, r).collections) for r in caller.roles]


def approval_request(engine: Engine, caller: Principal, action: Action) -> ApprovalRequest:
    """The plan of a state-changing action and the hash its approval must bind; changes nothing.
    Operators only: the plan's counts describe the whole store."""
    caller.require_operator(engine.cfg.serving.operator_role, f"request {action}")
    inputs: dict[str, Any]
    if action == approvals.GRAPH_CLEANUP:
        inputs = cleanup_inputs(engine.driver, engine.database, list(engine.packs))
        command = "rag cleanup"
    else:
        inputs = audit_trail(engine).deletion_plan(engine.cfg.audit.retention_days)
        command = "rag audit purge"
    digest = approvals.inputs_hash(inputs)
    request = ApprovalRequest(
        action=action,
        requested_by=caller.id,
        inputs=inputs,
        inputs_hash=digest,
        approve_with=(
            f'{command} --reason "<why>" --inputs-hash {digest}  '
            "(run by a person with an operator key in RAG_KEY; the approval is in their name)"
        ),
    )
    audit_trail(engine).append(
        AuditRecord(
            event="approval_requested",
            actor=caller.id,
            payload={"action": action, "inputs_hash": digest, "via": "service"},
        )
    )
    return request
