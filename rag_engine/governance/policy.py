"""Policy gate: a role maps to the collections it may read, decided before any store query.

Every store query on the query path takes the permitted collections as a parameter, so a
forbidden chunk cannot be returned even if ranking would like it. Collections a caller asked
for but may not read are reported as a governance event, never silently dropped.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from rag_engine.config import EngineConfig
from rag_engine.errors import PolicyError


class PolicyDecision(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: str
    collections: tuple[str, ...]
    blocked: tuple[str, ...] = ()

    def governance_event(self) -> dict[str, Any] | None:
        if not self.blocked:
            return None
        return {"event": "collections_blocked", "role": self.role, "blocked": list(self.blocked)}


def gate(cfg: EngineConfig, role: str, requested: list[str] | None = None) -> PolicyDecision:
    if role not in cfg.roles:
        raise PolicyError(f"unknown role {role!r}; configured roles: {sorted(cfg.roles)}")
    permitted = tuple(cfg.roles[role])
    if requested is None:
        return PolicyDecision(role=role, collections=permitted)
    allowed = tuple(c for c in requested if c in permitted)
    blocked = tuple(c for c in requested if c not in permitted)
    return PolicyDecision(role=role, collections=allowed, blocked=blocked)
