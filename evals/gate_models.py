"""The eval gate's result types, its acceptance file and the constants its modules share.

Part of the eval gate (``python -m evals.gates``), split by concern into flat modules beside
``evals/gates.py`` (flat, not a package, so ``evals.gates`` keeps its import path and CLI):

- ``evals.gate_models`` (this module): the pydantic types of a gate result (MetricGate,
  FloorCheck, ResourceCheck, GateAudit, AcceptanceOutcome, GatePolicy, GateResult), the
  acceptance file (Acceptance, with ``acceptance_inputs``: what it binds, needed by
  ``Acceptance.as_approval``), the exit codes and the reason and metric names. Imports no other
  gate module.
- ``evals.gate_metrics``: the checks (paired bootstrap, comparability, BM25 floor, embedder,
  cost/tokens/latency, generation model).
- ``evals.gate_acceptance``: reading, judging and auditing an acceptance.
- ``evals.gate_render``: the human summary.
- ``evals.gates``: the decision (``evaluate_gate``), ``run`` and the CLI.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rag_engine.config import EvalsConfig
from rag_engine.governance.approvals import ACCEPT_GATE_REGRESSION, Approval, inputs_hash

GATE_SCHEMA: Final = "rag-eval-gate/2"
Status = Literal["pass", "regression", "accepted", "incomparable"]
EXIT_CODES: dict[str, int] = {"pass": 0, "accepted": 0, "regression": 1, "incomparable": 2}
EMBEDDER_CHANGED = "embedder_changed_without_reindex"
GENERATION_CHANGED = "generation_changed_without_eval"
GENERATION_FAILED = "generation_failed"
GENERATION_IDENTITY_CHANGED = "generation_identity_changed"
ANSWER_METRICS: tuple[str, ...] = ("citation_hit_rate", "insufficient_evidence_accuracy")
"""The gate metrics that judge generated answers: a generation change is judged only if both are gated."""
RESOURCE_METRICS: tuple[str, ...] = ("cost_per_query", "tokens_per_query", "latency_ratio")
"""Gate metrics where lower is better, judged by a relative tolerance (not the bootstrap)."""
ESTIMABLE_METRICS: tuple[str, ...] = ("cost_per_query", "tokens_per_query")
"""The resource metrics computed from token counts, which may be estimates (the latency ratio is measured)."""
BM25_FLOOR = "bm25_floor"
PACK_REGRESSION = "pack_regression"
FLOOR_METRICS: tuple[str, ...] = ("ndcg@10", "map@10")
"""Engine vs BM25, per pack: rank quality over the whole top 10 (graded by position, and by
precision at every hit), where a fused engine should beat a single lexical scorer."""

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MetricGate(_Frozen):
    baseline_mean: float
    candidate_mean: float
    mean_delta: float
    ci_low: float
    ci_high: float
    n: int
    regressed: bool


class GroupGate(_Frozen):
    """The paired comparison of one group of queries: a pack (judged) or a pack's split (shown).

    ``judged`` is false for a split row, and for a pack whose paired queries are fewer than
    ``evals.pack_min_queries`` for a metric (that metric's row is shown, never a reason)."""

    metrics: dict[str, MetricGate]
    judged: bool
    n: int
    """Paired queries in the group (any metric)."""

    @property
    def regressed_metrics(self) -> tuple[str, ...]:
        return tuple(name for name, m in self.metrics.items() if m.regressed) if self.judged else ()


class FloorCheck(_Frozen):
    """One pack and metric of the BM25 floor: engine and BM25 means over the pack's answerable queries."""

    engine: float
    bm25: float
    delta: float
    """engine - bm25"""
    margin: float
    failed: bool
    """delta < -margin: the engine trails BM25 by more than the margin."""


class ResourceCheck(_Frozen):
    """One cost/token/latency gate metric: means (or ratios) of both reports and the allowed growth."""

    baseline: float | None
    candidate: float | None
    tolerance: float
    judged: bool
    regressed: bool
    note: str | None = None
    estimated: bool = False
    """cost_per_query / tokens_per_query rest, in either report, on token counts no provider reported
    (a replay fixture's characters / 4): the figures are estimates, and the note says how many."""


class GateAudit(_Frozen):
    """What the gate judged, recorded in its own output so it is auditable without the reports."""

    generation: dict[str, str] | None = None
    """The default generation provider and model of the gate's config."""
    embedder: dict[str, Any] | None = None
    """The configured embedder: provider, model, dimension, identity."""
    config_hash: str | None = None
    """Secret-redacted hash of the gate's config."""
    golden_paths: tuple[str, ...] = ()
    golden_hash: str | None = None
    candidate_generation: dict[str, Any] | None = None
    baseline_generation: dict[str, Any] | None = None
    generation_change: str | None = None
    """``baseline identity -> candidate identity`` when the model that answered differs (rule 5)."""
    candidate_embedder: str | None = None
    baseline_embedder: str | None = None


class Acceptance(_Frozen):
    """An acceptance file: a human decision that binds two exact report files."""

    baseline_sha256: Sha256
    candidate_sha256: Sha256
    reason: str
    accepted_by: str
    date: dt.date | None = None

    @field_validator("baseline_sha256", "candidate_sha256", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("reason", "accepted_by")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()

    def as_approval(self) -> Approval:
        """The acceptance as the one approval type: action ``accept_gate_regression`` bound to
        both report hashes (``acceptance_inputs``); ``at`` is its date, else now."""
        at: dict[str, Any] = {"at": dt.datetime.combine(self.date, dt.time(0), tzinfo=dt.UTC)} if self.date else {}
        return Approval(
            approved_by=self.accepted_by,
            reason=self.reason,
            action=ACCEPT_GATE_REGRESSION,
            inputs_hash=inputs_hash(acceptance_inputs(self.baseline_sha256, self.candidate_sha256)),
            **at,
        )


def acceptance_inputs(baseline_sha: str | None, candidate_sha: str | None) -> dict[str, str | None]:
    """What accepting a gate regression acts on: the two exact report files."""
    return {"baseline_sha256": baseline_sha, "candidate_sha256": candidate_sha}


class AcceptanceOutcome(_Frozen):
    source: str | None = None
    baseline_sha256: str | None = None
    candidate_sha256: str | None = None
    reason: str | None = None
    accepted_by: str | None = None
    date: dt.date | None = None
    matched: bool
    """The acceptance is valid and binds exactly the two files being compared."""
    applied: bool
    """It turned a regression into ``accepted``."""
    problems: tuple[str, ...] = ()


class GatePolicy(_Frozen):
    gate_metrics: tuple[str, ...]
    max_drop: float
    bootstrap_samples: int
    confidence: float
    seed: int
    min_queries: int
    bm25_margin: float | None
    pack_min_queries: int | None = None
    cost_tolerance: float | None = None
    tokens_tolerance: float | None = None
    latency_ratio_tolerance: float | None = None

    @classmethod
    def of(cls, cfg: EvalsConfig) -> GatePolicy:
        return cls(**{k: getattr(cfg, k) for k in cls.model_fields})


class GateResult(_Frozen):
    schema_id: Literal["rag-eval-gate/2"] = Field(GATE_SCHEMA, alias="schema")
    status: Status
    exit_code: int
    reasons: tuple[str, ...]
    metrics: dict[str, MetricGate]
    floor: dict[str, dict[str, FloorCheck]] = {}
    """pack -> metric -> the BM25 floor check (empty when the floor is off or was not judged)."""
    baseline_sha256: str | None
    candidate_sha256: str | None
    acceptance: AcceptanceOutcome | None
    policy: GatePolicy | None
    resources: dict[str, ResourceCheck] = {}
    """cost_per_query, tokens_per_query, latency_ratio when gated."""
    groups: dict[str, GroupGate] = {}
    """Per pack (``<pack>``, judged) and per pack and split (``<pack>@<split>``, shown): the
    same paired comparison as ``metrics`` on that group's queries alone."""
    audit: GateAudit | None = None
    recorded_by: str | None = None
    """Who judged: None for ``python -m evals.gates`` (``make eval-gate``); the Dagster check and
    its run (``dagster eval_report:eval_gate, run <id>``) when it wrote ``evals.reports_dir/gate.json``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    @property
    def regressed_metrics(self) -> tuple[str, ...]:
        return tuple(name for name, m in self.metrics.items() if m.regressed)

    @property
    def floor_failures(self) -> tuple[tuple[str, str], ...]:
        return tuple((pack, m) for pack, checks in self.floor.items() for m, c in checks.items() if c.failed)
