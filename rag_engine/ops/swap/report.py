"""The provider swap report: pydantic types only, no behaviour.

``SwapReport`` is what ``dry_run`` returns, what ``rag providers swap --json`` prints and what the
Dagster job ``provider_swap_dry_run`` stores as metadata, so its shape lives apart from the code
that fills it. ``Role`` names the engine roles a dry run compares.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from rag_engine.ops.quality_per_dollar import ModelRow

Role = Literal["generation", "embedding", "extraction", "local_inference"]
ROLES: tuple[str, ...] = ("generation", "embedding", "extraction", "local_inference")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Identity(_Frozen):
    model: str | None
    """Configured model name; None: the role is off (local inference without a model)."""
    provider: str | None = None
    kind: str | None = None
    served_model: str | None = None
    mode: Literal["hosted", "local"] | None = None
    endpoint_host: str | None = None
    """host[:port] only: no scheme, path, query or user info."""
    identity: str | None = None
    dimension: int | None = None
    capabilities: tuple[str, ...] = ()
    provider_enabled: bool | None = None
    credential_env: str | None = None
    """NAME of the credential variable (never its value); None: the provider needs none."""
    credential_present: bool | None = None
    reachable: bool | None = None
    """Local endpoint accepts connections (None: not probed: hosted, in-process or off)."""
    reachability_note: str | None = None


class CapabilityLoss(_Frozen):
    capability: str
    uses: str
    """What the engine uses the capability for in this role."""
    blocking: bool
    effect: str


class Pricing(_Frozen):
    price_key: str | None
    pricing_version: str | None
    known: bool
    basis: str | None = None
    """What the price is: a pricing file entry, or a provider's machine-time rate (local_cost)."""
    input_per_million: str | None = None
    cached_input_per_million: str | None = None
    output_per_million: str | None = None
    gap: str | None = None
    """Said plainly when the cost is unknown."""


class Rollback(_Frozen):
    config_hash: str
    """Secret-redacted hash of the current config (rag_engine.config.config_hash)."""
    config_file: str | None
    """The current config file (relative to the project root), when the engine's config is that file."""
    restore: str
    """The exact edit or command that restores the current config."""
    command: str | None = None
    """A shell command that restores the file, when it is committed unchanged in git."""
    notes: tuple[str, ...] = ()


class Consequence(_Frozen):
    kind: Literal["reindex", "reextract", "eval_required", "local_inference_change", "none"]
    summary: str
    chunks: int | None = None
    estimated_seconds: float | None = None
    rate_source: str | None = None
    estimated_input_tokens: int | None = None
    estimated_output_tokens: int | None = None
    estimated_cost_usd: str | None = None
    cost_note: str | None = None
    commands: tuple[str, ...] = ()


class LoadCheck(_Frozen):
    ok: bool
    seconds: float
    error: str | None = None


class SwapReport(_Frozen):
    schema_version: Literal["rag-swap-report/1"] = "rag-swap-report/1"
    role: Role
    mode: Literal["candidate_model", "candidate_config"]
    candidate_config_file: str | None = None
    changes: tuple[str, ...]
    """Config changes the candidate makes for this role (dotted key: old -> new)."""
    current: Identity
    candidate: Identity
    same_identity: bool
    capability_losses: tuple[CapabilityLoss, ...]
    pricing_current: Pricing
    pricing_candidate: Pricing
    rollback: Rollback
    consequences: tuple[Consequence, ...]
    status: Literal["ok", "blocked"]
    reasons: tuple[str, ...]
    """Why the swap is blocked (empty when ok)."""
    notes: tuple[str, ...] = ()
    application_code_change_required: bool
    load_check: LoadCheck
    quality_per_dollar: tuple[ModelRow, ...] = ()
    """Generation role: the current model's row and the candidate's (rag_engine.ops.quality_per_dollar),
    when both have eval reports."""
