"""The candidate for one role, and how it differs from the current config.

Which ``defaults`` key and which configured model roles fill each engine role, the candidate config
built from a model name (or compared with a whole candidate file), the capabilities the engine uses
in the role that the candidate lacks, and the copy of the candidate config written for the load
check. Pure functions of the configs: no I/O beyond writing that copy.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from rag_engine.config import EngineConfig
from rag_engine.errors import ConfigError
from rag_engine.ops.swap.report import CapabilityLoss, Identity

DEFAULT_FIELD = {
    "generation": "generation_model",
    "embedding": "embedding_model",
    "extraction": "extraction_model",
    "local_inference": "local_inference_model",
}
"""The ``defaults`` key that names each role's model."""

MODEL_ROLE = {
    "generation": ("generation",),
    "embedding": ("embedding",),
    "extraction": ("generation",),
    "local_inference": ("generation", "rerank"),
}
"""Which configured model roles may fill each engine role."""


def role_model(cfg: EngineConfig, role: str) -> str | None:
    d = cfg.defaults
    if role == "extraction":
        return d.extraction_model or d.generation_model
    name: str | None = getattr(d, DEFAULT_FIELD[role])
    return name


# -- capabilities -------------------------------------------------------------------------------

_USES: dict[str, tuple[tuple[str, str, bool, str], ...]] = {
    # role -> (capability, what the engine uses it for, blocking if missing, effect when missing)
    "generation": (
        ("generation", "answers (rag query, evals --generate)", True, "the model cannot answer at all"),
        (
            "structured_output",
            "the cited-answer schema",
            False,
            "answers are parsed tolerantly (JSON dug out of plain text); malformed answers degrade to extractive",
        ),
    ),
    "extraction": (
        ("generation", "graph extraction calls", True, "no extraction call can be made"),
        (
            "structured_output",
            "the extraction schema",
            False,
            "extraction falls back to tolerant parsing (JSON dug out of plain text): more schema-invalid "
            "answers, billed and rejected per chunk",
        ),
    ),
    "embedding": (("embeddings", "chunk and question vectors", True, "nothing can be embedded"),),
    "local_inference": (
        (
            "query_expansion",
            "query expansion before retrieval",
            False,
            "query expansion is skipped (local_inference_skipped)",
        ),
        ("rerank", "rerank of fused candidates", False, "rerank is skipped (local_inference_skipped)"),
        ("generation", "both steps ask the model in text", False, "both steps are skipped"),
    ),
}


def capability_losses(role: str, current: Identity, candidate: Identity) -> list[CapabilityLoss]:
    """Capabilities the engine uses in this role that the candidate lacks: always for a required one;
    for an optional one only when the current model has it (a loss, not a standing gap)."""
    if candidate.model is None:
        return []
    losses = []
    for cap, uses, required, effect in _USES[role]:
        if cap in candidate.capabilities:
            continue
        if required or cap in current.capabilities:
            # local inference loses a step, it never blocks: the query path degrades to the original
            losses.append(CapabilityLoss(capability=cap, uses=uses, blocking=required, effect=effect))
    return losses


# -- candidate config -----------------------------------------------------------------------------


def candidate_from_model(cfg: EngineConfig, role: str, candidate: str) -> tuple[EngineConfig, list[str]]:
    model = cfg.model(candidate)
    if model is None:
        raise ConfigError(
            f"--candidate {candidate!r} is not a configured model; configured: {[m.name for m in cfg.models]}"
        )
    if model.role not in MODEL_ROLE[role]:
        raise ConfigError(
            f"--candidate {candidate!r} has role {model.role!r}; role {role} needs {' or '.join(MODEL_ROLE[role])}"
        )
    field = DEFAULT_FIELD[role]
    old = getattr(cfg.defaults, field)
    changes = [f"defaults.{field}: {old or 'unset'} -> {candidate}"] if old != candidate else []
    defaults = cfg.defaults.model_copy(update={field: candidate})
    providers = list(cfg.providers)
    for i, p in enumerate(providers):
        if p.name == model.provider and not p.enabled:  # a default on a disabled provider is refused
            providers[i] = p.model_copy(update={"enabled": True})
            changes.append(f"providers.{p.name}.enabled: false -> true")
    return cfg.model_copy(update={"defaults": defaults, "providers": tuple(providers)}), changes


def diff_role(cur: EngineConfig, cand: EngineConfig, role: str) -> list[str]:
    changes = []
    a, b = role_model(cur, role), role_model(cand, role)
    if a != b:
        changes.append(f"defaults.{DEFAULT_FIELD[role]}: {a or 'unset'} -> {b or 'unset'}")
    for name in {n for n in (a, b) if n}:
        ma, mb = cur.model(name), cand.model(name)
        if ma is not None and mb is not None and ma != mb:
            changes.append(f"models.{name}: changed")
        pa = cur.provider(ma.provider) if ma else None
        pb = cand.provider(mb.provider) if mb else None
        if pa is not None and pb is not None and pa.name == pb.name and pa != pb:
            changes.append(f"providers.{pa.name}: changed")
    if cur.pricing_file != cand.pricing_file:
        changes.append(f"pricing_file: {cur.pricing_file} -> {cand.pricing_file}")
    return changes


def write_config(cfg: EngineConfig, directory: Path) -> Path:
    path = directory / "candidate-engine.yaml"
    data = cfg.model_dump(mode="json", exclude_defaults=False)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path
