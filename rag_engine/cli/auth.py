"""Who runs a command: the key in ``RAG_KEY`` (or the file `rag --key-file` names), checked against
the configured principals (``governance.principals``).

Once any principal is configured (``serving.principals``), operator reads (`rag audit`, `status`,
`costs`) and every command that takes ``--approved-by`` (cleanup, reindex, audit purge, dry runs
included) need the key of a principal holding ``serving.operator_role``, checked before the store
is touched; the approval is then made in that principal's name. With none configured they run as
before, for the person at the machine, and approvals say so (``local:<name>``); a key given then
is refused, since nothing could check it. `rag query` takes a
key too: its principal is then the query's actor and bounds the roles it may ask for.

The key is read from the environment or a file, never from the command line (argv is visible to
every user of the machine in the process list), and it is never printed: errors say "invalid key"
or name the principal. Refusals are typed errors (``Unauthenticated``, ``Forbidden``), so they are
one line and exit 2 like every other typed error, and each is a ``request_refused`` audit record.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rag_engine.cli.common import state
from rag_engine.errors import Forbidden, Unauthenticated

if TYPE_CHECKING:
    from rag_engine.engine import Engine
    from rag_engine.governance.principals import Principal

KEY_ENV = "RAG_KEY"
"""The environment variable holding the caller's key."""

_NOTHING_TO_CHECK = (
    f"a key was given ({KEY_ENV} or --key-file) but no principal is configured (serving.principals): "
    f"there is nothing to check it against; unset {KEY_ENV} to run as this machine's operator"
)
"""A key nobody can check is refused rather than ignored: running as "authenticated" when nothing
was checked is the mistake this module exists to prevent."""


def cli_key(ctx: typer.Context) -> str | None:
    """The key of the person running the command: the `--key-file` file's content (stripped), else
    ``RAG_KEY``, else None."""
    path = state(ctx).key_file
    if path:
        try:
            key = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise Unauthenticated(f"--key-file {path}: cannot be read ({type(exc).__name__})") from None
        if not key:
            raise Unauthenticated(f"--key-file {path}: the file is empty")
        return key
    return os.environ.get(KEY_ENV) or None


def operator(ctx: typer.Context, eng: Engine, command: str) -> Principal | None:
    """The authenticated operator running ``command``, or None when no principal is configured
    (today's single-operator behaviour). Raises before anything else runs: ``Unauthenticated`` for
    no key or a bad one, ``Forbidden`` for a principal without the operator role."""
    from rag_engine.governance.principals import PrincipalRegistry

    key = cli_key(ctx)
    if not eng.cfg.serving.principals:
        if key is not None:
            raise Unauthenticated(_NOTHING_TO_CHECK)
        return None
    principal: Principal | None = None
    try:
        if key is None:
            raise Unauthenticated(
                f"{command} needs an operator's key: principals are configured (serving.principals); "
                f"set {KEY_ENV} or pass `rag --key-file PATH`"
            )
        principal = PrincipalRegistry(eng.cfg, eng.root, eng.env).authenticate(key)
        return principal.require_operator(eng.cfg.serving.operator_role, command)
    except (Unauthenticated, Forbidden) as exc:
        _record_refusal(eng, command, exc, principal)
        raise


def _record_refusal(eng: Engine, command: str, exc: Exception, principal: Principal | None) -> None:
    """A refused operator command on the audit trail (``request_refused``, as the service records
    its refusals): the authenticated principal when there is one, the command and the error type;
    never the key. A trail that cannot be written leaves the refusal as it is."""
    from rag_engine.governance.audit import AuditRecord, audit_trail

    record = AuditRecord(
        event="request_refused",
        actor=principal.id if principal else None,
        payload={"command": command, "error": type(exc).__name__, "via": "cli"},
    )
    with contextlib.suppress(Exception):  # the refusal is the answer; a trail that is down does not change it
        audit_trail(eng).append(record)


def approver(op: Principal | None, approved_by: str) -> str:
    """``--approved-by`` as the approval records it: the authenticated operator's id (a different
    name refused), or with no principal configured the typed name as ``local:<name>``."""
    from rag_engine.governance.principals import approver as bind

    return bind(op, approved_by)


def approve_as(op: Principal | None) -> str:
    """The ``--approved-by`` part of an "approve with" hint: none for an authenticated operator (the
    approval is in its name)."""
    return "" if op is not None else "--approved-by WHO "


def query_principal(ctx: typer.Context, eng: Engine) -> Principal | None:
    """The principal of the key `rag query` was given, if any (with none, ``--role`` is the
    operator's flag on this machine, as before)."""
    from rag_engine.governance.principals import PrincipalRegistry

    key = cli_key(ctx)
    if key is None:
        return None
    if not eng.cfg.serving.principals:
        raise Unauthenticated(_NOTHING_TO_CHECK)
    return PrincipalRegistry(eng.cfg, eng.root, eng.env).authenticate(key)
