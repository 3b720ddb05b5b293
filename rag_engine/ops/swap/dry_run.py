"""``dry_run``: compare one role's current model with a candidate and return a ``SwapReport``.

It builds the candidate config (``candidate``), probes both identities and loads the candidate
config in a fresh interpreter (``probes``), prices the work (``consequences``), says how to undo
it (``rollback``), and turns what it finds into blocking reasons and notes. What only the dry run
uses stays here: the role check, the quality-per-dollar rows of a generation swap and the names of
the credential variables to redact.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeGuard

from rag_engine.config import EngineConfig, load_config, under_root
from rag_engine.errors import ConfigError, RagError
from rag_engine.ops.quality_per_dollar import ModelRow
from rag_engine.ops.swap.candidate import (
    MODEL_ROLE,
    candidate_from_model,
    capability_losses,
    diff_role,
    role_model,
    write_config,
)
from rag_engine.ops.swap.consequences import (
    embedding_consequence,
    extraction_consequence,
    generation_consequence,
    pricing,
)
from rag_engine.ops.swap.probes import LOAD_TIMEOUT_S, identity, load_check, redact_values
from rag_engine.ops.swap.report import ROLES, Consequence, Role, SwapReport
from rag_engine.ops.swap.rollback import plan_rollback
from rag_engine.providers.registry import ProviderRegistry


def _is_role(role: str) -> TypeGuard[Role]:
    return role in ROLES


def dry_run(
    engine: Any,
    *,
    role: str,
    candidate: str | None = None,
    candidate_config: str | Path | None = None,
    config_path: str | Path | None = None,
    sample: bool = True,
    load_timeout_s: float = LOAD_TIMEOUT_S,
) -> SwapReport:
    """Compare the current model of ``role`` with a candidate; changes nothing.

    ``candidate``: a configured model to put in the role's default (its provider enabled if it was
    not); ``candidate_config``: a whole candidate config file (relative to the project root).
    ``config_path``: the file the engine's config came from (default RAG_CONFIG, else
    config/engine.yaml), for the rollback. ``sample``: embed a few chunks through a candidate embedder
    to measure its rate. Raises ConfigError for bad input (unknown role or model, unreadable file).
    """
    from rag_engine import DEFAULT_CONFIG

    if not _is_role(role):
        raise ConfigError(f"unknown role {role!r}; roles: {list(ROLES)}")
    if (candidate is None) == (candidate_config is None):
        raise ConfigError(
            "name exactly one of a candidate model (--candidate) or a candidate config file (--candidate-config)"
        )
    root = Path(engine.root)
    env: Mapping[str, str] = engine.env
    cfg: EngineConfig = engine.cfg
    mode: Literal["candidate_model", "candidate_config"]
    if candidate is not None:
        cand_cfg, changes = candidate_from_model(cfg, role, candidate)
        mode, cand_file = "candidate_model", None
    else:
        assert candidate_config is not None, "exactly one of candidate / candidate_config is set (checked above)"
        cand_path = under_root(root, candidate_config)
        cand_cfg = load_config(cand_path)
        changes = diff_role(cfg, cand_cfg, role)
        mode, cand_file = "candidate_config", str(candidate_config)
        name = role_model(cand_cfg, role)
        named = cand_cfg.model(name) if name is not None else None
        if name is not None and (named is None or named.role not in MODEL_ROLE[role]):
            raise ConfigError(
                f"{candidate_config}: the {role} model {name!r} is not a configured "
                f"{' or '.join(MODEL_ROLE[role])} model"
            )

    current = identity(cfg, role_model(cfg, role), env, root, probe=False)
    cand = identity(cand_cfg, role_model(cand_cfg, role), env, root, probe=True)
    same = current.identity == cand.identity
    reasons: list[str] = []
    notes: list[str] = []

    # credentials and reachability
    if cand.model is not None and cand.credential_env and not cand.credential_present:
        if cand.mode == "hosted":
            reasons.append(
                f"missing credential: {cand.provider} is a hosted provider enabled by the candidate, and "
                f"environment variable {cand.credential_env} is not set"
            )
        else:
            reasons.append(
                f"missing credential: environment variable {cand.credential_env} of {cand.provider} is not set"
            )
    if cand.reachable is False:
        reasons.append(f"unreachable local endpoint: {cand.reachability_note}")
    # every other enabled provider of the candidate config must start too (the registry checks them all)
    try:
        ProviderRegistry(cand_cfg, env)
    except RagError as exc:
        if type(exc).__name__ != "MissingCredential" or not any(r.startswith("missing credential") for r in reasons):
            reasons.append(
                f"the candidate config is refused at startup: {type(exc).__name__}: "
                f"{redact_values(str(exc), env, _secret_names(cfg, cand_cfg))}"
            )

    losses = capability_losses(role, current, cand)
    for loss in losses:
        if loss.blocking:
            reasons.append(f"capability loss: {cand.model} lacks {loss.capability} ({loss.uses}): {loss.effect}")
        else:
            notes.append(f"{cand.model} lacks {loss.capability}: {loss.effect}")
    if role == "local_inference" and cand.model is None:
        notes.append("the candidate turns local inference off: queries skip expansion and rerank")

    pricing_cur, _ = pricing(cfg, current, root)
    pricing_cand, table = pricing(cand_cfg, cand, root)

    consequences: list[Consequence] = []
    if same:
        consequences.append(
            Consequence(
                kind="none", summary="same model identity: nothing to re-index, re-extract or re-evaluate for this role"
            )
        )
    elif role == "embedding":
        can_call = sample and not any(r.startswith(("missing credential", "unreachable")) for r in reasons)
        consequences.append(
            embedding_consequence(engine, cand_cfg, current, cand, env, table, pricing_cand.price_key, notes, can_call)
        )
    elif role == "extraction":
        consequences.append(extraction_consequence(engine, cand_cfg, current, cand, table, pricing_cand.price_key))
    elif role == "generation":
        consequences.append(generation_consequence(current, cand))
        if role_model(cfg, "extraction") == role_model(cfg, "generation") and cfg.defaults.extraction_model is None:
            notes.append(
                "extraction follows the generation model (no defaults.extraction_model): "
                "run the dry run for role extraction too"
            )
    else:
        consequences.append(
            Consequence(
                kind="local_inference_change",
                summary=f"query expansion / rerank change ({current.identity} -> {cand.identity}): retrieval order "
                "changes; run the eval gate before relying on it",
                commands=(
                    "RAG_CONFIG=<candidate config> python -m evals.runner --config <candidate config> "
                    "--output var/eval/candidate.json",
                    "python -m evals.gates ...",
                ),
            )
        )

    quality: tuple[ModelRow, ...] = ()
    if role == "generation" and not same and current.model and cand.model:
        quality = _quality_rows(cfg, cand_cfg, current.model, cand.model, env, root, notes)

    cfg_path = Path(config_path) if config_path else Path(os.environ.get("RAG_CONFIG") or DEFAULT_CONFIG)
    rollback = plan_rollback(engine, role, under_root(root, cfg_path), changes, mode)

    with tempfile.TemporaryDirectory(prefix="rag-swap-") as tmp:
        cand_path = write_config(cand_cfg, Path(tmp))
        check = load_check(cand_path, root, env, _secret_names(cfg, cand_cfg), timeout_s=load_timeout_s)
    if not check.ok:
        reasons.append(
            f"application code change required: loading the engine and the Dagster Definitions "
            f"with the candidate config failed: {check.error}"
        )

    return SwapReport(
        role=role,
        mode=mode,
        candidate_config_file=cand_file,
        changes=tuple(changes),
        current=current,
        candidate=cand,
        same_identity=same,
        capability_losses=tuple(losses),
        pricing_current=pricing_cur,
        pricing_candidate=pricing_cand,
        rollback=rollback,
        consequences=tuple(consequences),
        status="blocked" if reasons else "ok",
        reasons=tuple(reasons),
        notes=tuple(notes),
        application_code_change_required=not check.ok,
        load_check=check,
        quality_per_dollar=quality,
    )


def _quality_rows(
    cfg: EngineConfig,
    cand_cfg: EngineConfig,
    current: str,
    candidate: str,
    env: Mapping[str, str],
    root: Path,
    notes: list[str],
) -> tuple[ModelRow, ...]:
    """The current and the candidate generation model's quality-per-dollar rows, each priced by its
    own config (the pricing file, or its provider's machine-time rate); a model without an eval
    report keeps its row (its price and cost are still known) and gets a note naming the report."""
    from rag_engine.ops.eval_quality import latest_reports
    from rag_engine.ops.quality_per_dollar import ledger_usage, rows_for
    from rag_engine.providers.ledger import UsageLedger, ledger_url

    ledger = UsageLedger(ledger_url(cfg, env, root))
    try:
        usage = ledger_usage(ledger)
    finally:
        ledger.dispose()
    reports = latest_reports(cfg, root)
    cur = rows_for(cfg, root, [current], usage, reports)[0]
    now = cfg.model(current)
    proxy = (now.name, now.provider, now.served_model) if now is not None else None  # the same prompts
    cand = rows_for(cand_cfg, root, [candidate], usage, reports, proxy=proxy)[0]
    missing = [r.model for r in (cur, cand) if r.report is None]
    if missing:
        notes.append(
            f"quality per dollar: no eval report answered by {' or '.join(missing)}; run "
            "`python -m evals.runner --config <config naming it> --generate --output var/eval/<model>.json` "
            "to compare the rows"
        )
    return (cur, cand)


def _secret_names(*cfgs: EngineConfig) -> set[str]:
    return {p.credential_env for c in cfgs for p in c.providers if p.credential_env}
