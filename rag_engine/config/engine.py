"""The whole of ``config/engine.yaml``: one model over the parts, with the checks that span them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rag_engine.config.base import Frozen
from rag_engine.config.operations import (
    AuditConfig,
    AutomationConfig,
    BudgetsConfig,
    ContextBudgetsConfig,
    CostsConfig,
    EvalsConfig,
)
from rag_engine.config.packs import PackEntry
from rag_engine.config.providers import DefaultsConfig, LocalInferenceConfig, ModelConfig, ProviderConfig
from rag_engine.config.retrieval import GraphConfig, PlannerConfig, RetrievalConfig, TraversalConfig
from rag_engine.config.serving import ServingConfig, TracingConfig
from rag_engine.config.storage import StorageConfig
from rag_engine.errors import UnknownRoleCollection


class EngineConfig(Frozen):
    version: Literal[1] = 1
    storage: StorageConfig = StorageConfig()
    providers: tuple[ProviderConfig, ...]
    models: tuple[ModelConfig, ...]
    defaults: DefaultsConfig
    packs: tuple[PackEntry, ...] = ()
    roles: dict[str, tuple[str, ...]] = {}
    retrieval: RetrievalConfig = RetrievalConfig()
    graph: GraphConfig = GraphConfig()
    traversal: TraversalConfig = TraversalConfig()
    planner: PlannerConfig = PlannerConfig()
    budgets: BudgetsConfig = BudgetsConfig()
    context: ContextBudgetsConfig = ContextBudgetsConfig()
    local_inference: LocalInferenceConfig = LocalInferenceConfig()
    evals: EvalsConfig = EvalsConfig()
    automation: AutomationConfig = AutomationConfig()
    audit: AuditConfig = AuditConfig()
    costs: CostsConfig = CostsConfig()
    serving: ServingConfig = ServingConfig()
    tracing: TracingConfig = TracingConfig()
    pricing_file: str = "config/pricing.yaml"
    max_document_bytes: int = Field(5_000_000, ge=1)

    @model_validator(mode="after")
    def _unique_names(self) -> EngineConfig:
        sources = tuple(s for p in self.packs for s in p.live_sources)
        for label, items in (
            ("providers", self.providers),
            ("models", self.models),
            ("packs", self.packs),
            ("live source", sources),
        ):
            names = [i.name for i in items]
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"duplicate {label} names: {dupes}")
        return self

    @model_validator(mode="after")
    def _graph_stays_bounded(self) -> EngineConfig:
        """The graph's caps must agree: a graph tail longer than the cap on graph-only candidates in
        the top k could never be honoured, and is refused rather than silently cut; a cap of
        ``final_k`` or more would let the graph fill the whole top k, and is refused while the graph
        leg can return candidates. Any graph weight is accepted: the cap and the protection of exact
        hits are applied to the fused order (``graph/quality_bounds.py``), so no weight can break them."""
        if self.retrieval.graph_tail > self.traversal.max_graph_only_in_top_k:
            raise ValueError(
                f"retrieval.graph_tail {self.retrieval.graph_tail} exceeds traversal.max_graph_only_in_top_k "
                f"{self.traversal.max_graph_only_in_top_k}: the graph may fill at most that many places of the top k"
            )
        graph_on = self.traversal.max_candidates > 0 and self.retrieval.weights.get("graph", 1.0) > 0
        if graph_on and self.traversal.max_graph_only_in_top_k >= self.retrieval.final_k:
            raise ValueError(
                f"traversal.max_graph_only_in_top_k {self.traversal.max_graph_only_in_top_k} must be below "
                f"retrieval.final_k {self.retrieval.final_k}: a cap of k or more lets graph-only candidates fill "
                "the whole top k (turn the graph off with traversal.max_candidates: 0 or retrieval.weights.graph: 0)"
            )
        return self

    @model_validator(mode="after")
    def _roles_name_known_collections(self) -> EngineConfig:
        """A role naming a collection no enabled pack has is a typo or a stale grant: refused
        (typed, not a ValidationError) instead of silently granting nothing or something later."""
        known = {c for p in self.enabled_packs for c in p.collections}
        if self.serving.operator_role in self.roles:
            raise ValueError(
                f"serving.operator_role {self.serving.operator_role!r} is also a retrieval role (roles:); "
                "the operator role grants operator commands, not collections: give it another name"
            )
        for principal in self.serving.principals:
            unknown_roles = sorted(set(principal.roles) - set(self.roles) - {self.serving.operator_role})
            if unknown_roles:
                raise ValueError(f"serving.principals.{principal.id}: unknown role(s) {unknown_roles}")
        ids = [p.id for p in self.serving.principals]
        if len(set(ids)) != len(ids):
            raise ValueError(f"serving.principals: duplicate ids {sorted({i for i in ids if ids.count(i) > 1})}")
        for role, collections in self.roles.items():
            unknown = sorted(set(collections) - known)
            if unknown:
                raise UnknownRoleCollection(
                    f"roles.{role}: collection(s) {unknown} belong to no enabled pack; known: {sorted(known)}",
                    role=role,
                )
        return self

    # -- small lookups every layer needs -------------------------------------------------
    def provider(self, name: str) -> ProviderConfig | None:
        return next((p for p in self.providers if p.name == name), None)

    def model(self, name: str) -> ModelConfig | None:
        return next((m for m in self.models if m.name == name), None)

    def pack(self, name: str) -> PackEntry | None:
        return next((p for p in self.packs if p.name == name), None)

    @property
    def enabled_packs(self) -> tuple[PackEntry, ...]:
        return tuple(p for p in self.packs if p.enabled)
