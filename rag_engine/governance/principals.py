"""Principals: who a service caller is, decided by a key, never by what the caller claims.

Each configured principal (``serving.principals``) has an id, the roles it may ask for, and the
SHA-256 digests of its keys, read from an environment variable or a file named in the config (the
config holds names, never a key or a digest). Keys are high-entropy random strings, so a plain
SHA-256 is enough to store them (no password stretching is needed for a 256-bit secret) and the
comparison is constant-time. A key file is read again whenever its modification time or size
changes and an environment variable on every call, so rotating a key (add the new digest, then
remove the old) or revoking one (remove its digest) takes effect without a restart.

A key's value is never stored, logged or echoed: errors name the principal or say "invalid key".

Operators. ``serving.operator_role`` is held beside retrieval roles but is none itself: the registry
keeps it apart (``Principal.operator``), so no query runs under it. Once any principal is configured,
operator reads and approvals need a principal holding it (``PrincipalRegistry.operator``) and an
approval is made in that principal's name (``approver``): the name a person types is checked, never
trusted. With no principal configured (one operator on one machine: the demo, a first run) the
operator is unauthenticated and an approval carries the typed name as ``local:<name>``; a principal
id cannot hold ``:``, so such an approval is never mistaken for an authenticated one.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rag_engine.config import EngineConfig, PrincipalConfig, under_root
from rag_engine.errors import Forbidden, Unauthenticated

HEX = frozenset("0123456789abcdef")


UNAUTHENTICATED_PREFIX = "local:"
"""What an approval's ``approved_by`` starts with when no principal is configured: a name typed at
the machine, not an identity anyone checked."""


@dataclass(frozen=True)
class Principal:
    id: str
    roles: tuple[str, ...]
    """The retrieval roles it may ask for (the operator role is not one)."""
    operator: bool = False
    """Whether it holds ``serving.operator_role``: operator reads and approval requests."""

    def role(self, asked: str | None) -> str:
        """The role a request runs under: the one it asked for if this principal holds it, else
        its first role when it asked for none."""
        if asked is None:
            if not self.roles:
                raise Forbidden(f"principal {self.id} holds no retrieval role")
            return self.roles[0]
        if asked not in self.roles:
            raise Forbidden(f"principal {self.id} may not ask for role {asked!r}; its roles: {list(self.roles)}")
        return asked

    def require_operator(self, operator_role: str, action: str) -> Principal:
        """This principal if it holds ``operator_role``; ``Forbidden`` naming ``action`` otherwise."""
        if not self.operator:
            raise Forbidden(
                f"principal {self.id} does not hold the operator role ({operator_role!r}, "
                f"serving.operator_role): {action} refused"
            )
        return self


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _digests(text: str) -> frozenset[str]:
    lines = (line.split("#", 1)[0].strip().lower() for line in text.splitlines())
    return frozenset(d for d in lines if len(d) == 64 and set(d) <= HEX)


class PrincipalRegistry:
    """Authenticates keys against the configured principals' digests, reloading them as they change."""

    def __init__(self, cfg: EngineConfig, root: Path, env: Mapping[str, str] | None = None):
        self._principals = cfg.serving.principals
        self._operator_role = cfg.serving.operator_role
        self._root = root
        self._env = os.environ if env is None else env
        self._files: dict[str, tuple[tuple[int, int], frozenset[str]]] = {}
        self._lock = threading.Lock()

    @property
    def configured(self) -> bool:
        return bool(self._principals)

    def _file_digests(self, path: Path) -> frozenset[str]:
        try:
            stat = path.stat()
        except OSError:
            return frozenset()  # a missing file grants nothing
        stamp = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            cached = self._files.get(str(path))
            if cached is not None and cached[0] == stamp:
                return cached[1]
        try:
            digests = _digests(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            digests = frozenset()
        with self._lock:
            self._files[str(path)] = (stamp, digests)
        return digests

    def digests(self, principal: PrincipalConfig) -> frozenset[str]:
        if principal.key_sha256_env is not None:
            return _digests(self._env.get(principal.key_sha256_env, ""))
        assert principal.key_sha256_file is not None  # the config requires one of the two
        return self._file_digests(under_root(self._root, principal.key_sha256_file))

    def authenticate(self, key: str | None) -> Principal:
        """The principal whose key this is, or ``Unauthenticated``; checks every principal's digests
        with a constant-time comparison."""
        if not key:
            raise Unauthenticated("a key is required (Authorization: Bearer <key>)")
        digest = key_digest(key)
        found: PrincipalConfig | None = None
        for principal in self._principals:
            for known in self.digests(principal):
                if hmac.compare_digest(known, digest) and found is None:
                    found = principal
        if found is None:
            raise Unauthenticated("invalid key")
        return Principal(
            id=found.id,
            roles=tuple(r for r in found.roles if r != self._operator_role),
            operator=self._operator_role in found.roles,
        )

    def operator(self, key: str | None, command: str) -> Principal:
        """The principal of ``key`` if it holds the operator role: ``Unauthenticated`` for no key or
        a bad one, ``Forbidden`` for a principal without the role. ``command`` names what was asked."""
        return self.authenticate(key).require_operator(self._operator_role, command)


def approver(operator: Principal | None, claimed: str) -> str:
    """Who an approval is made by. With an authenticated ``operator``: that principal's id; a
    ``claimed`` name (``--approved-by``) other than it is refused (``Forbidden``: an approval cannot
    be made in someone else's name), a blank one is taken as not given. Without one (no principal
    configured): the claimed name marked ``local:<name>``, or the claim as it is when blank (the
    approval then refuses it) or already marked."""
    name = claimed.strip()
    if operator is not None:
        if name and name != operator.id:
            raise Forbidden(
                f"--approved-by {name!r} is not the authenticated principal {operator.id!r}: "
                "an approval cannot be made in someone else's name; leave --approved-by out"
            )
        return operator.id
    if not name or name.startswith(UNAUTHENTICATED_PREFIX):
        return claimed
    return UNAUTHENTICATED_PREFIX + name
