"""Typed, frozen view of config/engine.yaml.

Config is data and code is generic: every knob the engine reads lives here, validated once at
load time. Errors name the offending key and its line in the file, because a bad deploy is
usually one typo. The config never holds secrets, only the *names* of environment variables.

One module per concern, read top-down as the reference of ``config/engine.yaml``: ``base``
(frozen models, env NAMES, root-relative paths), ``storage``, ``providers`` (providers, models,
local costs), ``packs`` (pack entries, live sources), ``retrieval`` (the query path, graph,
traversal, planner), ``operations`` (budgets, evals, automation, audit, costs), ``serving``,
``engine`` (the whole file) and ``loading`` (file:line errors, redaction, hashes). Callers import
from here: ``from rag_engine.config import EngineConfig, load_config``.
"""

from rag_engine.config.base import ENV_NAME, Frozen, under_root
from rag_engine.config.engine import EngineConfig
from rag_engine.config.loading import _redact, config_hash, load_config, redact_url, redacted_dump, slice_hash
from rag_engine.config.operations import (
    AuditConfig,
    AutomationConfig,
    BudgetsConfig,
    ContextBudgetsConfig,
    CostsConfig,
    EvalsConfig,
    FirstRunBudgetConfig,
)
from rag_engine.config.packs import SQL_NAME, LiveSourceConfig, PackEntry
from rag_engine.config.providers import (
    Capability,
    DefaultsConfig,
    InputModes,
    LocalCostConfig,
    LocalInferenceConfig,
    ModelConfig,
    ProviderConfig,
    ProviderKind,
    RateLimitConfig,
    StructuredOutputForm,
)
from rag_engine.config.retrieval import (
    LEGS,
    EvidenceConfig,
    GraphConfig,
    PlannerConfig,
    RerankConfig,
    RetrievalConfig,
    TraversalConfig,
)
from rag_engine.config.serving import PrincipalConfig, ServingConfig, ServingLimitsConfig, TracingConfig
from rag_engine.config.storage import LedgerConfig, Neo4jConfig, StorageConfig

__all__ = [
    "ENV_NAME",
    "LEGS",
    "SQL_NAME",
    "AuditConfig",
    "AutomationConfig",
    "BudgetsConfig",
    "Capability",
    "ContextBudgetsConfig",
    "CostsConfig",
    "DefaultsConfig",
    "EngineConfig",
    "EvalsConfig",
    "EvidenceConfig",
    "FirstRunBudgetConfig",
    "Frozen",
    "GraphConfig",
    "InputModes",
    "LedgerConfig",
    "LiveSourceConfig",
    "LocalCostConfig",
    "LocalInferenceConfig",
    "ModelConfig",
    "Neo4jConfig",
    "PackEntry",
    "PlannerConfig",
    "PrincipalConfig",
    "ProviderConfig",
    "ProviderKind",
    "RateLimitConfig",
    "RerankConfig",
    "RetrievalConfig",
    "ServingConfig",
    "ServingLimitsConfig",
    "StorageConfig",
    "StructuredOutputForm",
    "TracingConfig",
    "TraversalConfig",
    "_redact",
    "config_hash",
    "load_config",
    "redact_url",
    "redacted_dump",
    "slice_hash",
    "under_root",
]
