"""Provider replacement dry run: what swapping one role's model would change, before anyone does it.

    dry_run(engine, role=R, candidate=MODEL)          # the current config with R's default replaced
    dry_run(engine, role=R, candidate_config=FILE)    # the current config against a whole candidate file
    render_text(report) -> str                        (``rag providers swap``; the Dagster job
                                                       ``provider_swap_dry_run`` stores the same report)

Why a dry run and not a doc: a swap fails in ways only the data and the environment know (the
credential variable is not set in this deployment, the local server is down, the candidate lacks a
capability the engine calls, the index holds N chunks in another vector space). The report says each
of those with figures, names credential *variables* only (never a value), and proves the
application needs no code change by loading the engine and the Dagster Definitions with the candidate
config in a fresh interpreter. It changes nothing: the only model call is an optional sample of a few
passages through a candidate embedder (to measure its rate), recorded in the ledger like any other.

Roles: ``generation`` (defaults.generation_model), ``embedding`` (defaults.embedding_model),
``extraction`` (defaults.extraction_model, else the generation model), ``local_inference``
(defaults.local_inference_model; query expansion and rerank).
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, TypeGuard
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict

from rag_engine.config import EngineConfig, config_hash, load_config, under_root
from rag_engine.errors import ConfigError, RagError
from rag_engine.ops.quality_per_dollar import ModelRow
from rag_engine.providers.registry import ModelSpec, ProviderRegistry, resolve_endpoint

Role = Literal["generation", "embedding", "extraction", "local_inference"]
ROLES: tuple[str, ...] = ("generation", "embedding", "extraction", "local_inference")


def _is_role(role: str) -> TypeGuard[Role]:
    return role in ROLES


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

SAMPLE_TEXTS = 8
"""Passages embedded through a reachable candidate embedder to measure its rate."""
LOAD_TIMEOUT_S = 300.0
"""Seconds the candidate-config load check (engine + Dagster Definitions) may take."""
CONNECT_TIMEOUT_S = 3.0
PLACEHOLDER = "swap-dry-run-placeholder"
"""Stands in for a missing credential in the load check only (the registry checks presence; the
missing variable is reported as a blocking reason on its own)."""


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


# -- the role's model ---------------------------------------------------------------------------


def role_model(cfg: EngineConfig, role: str) -> str | None:
    d = cfg.defaults
    if role == "extraction":
        return d.extraction_model or d.generation_model
    name: str | None = getattr(d, DEFAULT_FIELD[role])
    return name


def _host(url: str | None) -> str | None:
    if not url:
        return None
    parts = urlsplit(url)
    if not parts.hostname:
        return None
    return f"{parts.hostname}:{parts.port}" if parts.port else parts.hostname


def _reachable(url: str) -> tuple[bool, str]:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=CONNECT_TIMEOUT_S):
            return True, f"{_host(url)} accepts connections"
    except OSError as exc:
        return False, f"{_host(url)} does not accept connections ({type(exc).__name__})"


def _identity(
    cfg: EngineConfig, model_name: str | None, env: Mapping[str, str], root: Path, *, probe: bool
) -> Identity:
    if model_name is None:
        return Identity(model=None)
    model = cfg.model(model_name)
    if model is None:
        raise ConfigError(f"unknown model {model_name!r}; configured: {[m.name for m in cfg.models]}")
    provider = cfg.provider(model.provider)
    if provider is None:
        raise ConfigError(f"model {model_name!r} names unknown provider {model.provider!r}")
    spec = ModelSpec(model=model, provider=provider)
    endpoint = resolve_endpoint(provider, env)
    if provider.kind == "openai" and not endpoint:
        endpoint = "https://api.openai.com/v1"
    reachable, note = None, None
    if probe and not provider.hosted:
        if provider.kind == "openai_compatible":
            reachable, note = _reachable(endpoint) if endpoint else (False, "no endpoint configured")
        elif provider.kind == "replay":
            ok = bool(provider.cassette and under_root(root, provider.cassette).is_file())
            reachable, note = ok, f"cassette {provider.cassette} {'present' if ok else 'missing'}"
        elif provider.kind == "local_hash":
            note = "in-process (no server)"
    return Identity(
        model=model.name,
        provider=provider.name,
        kind=provider.kind,
        served_model=model.served_model,
        mode="hosted" if provider.hosted else "local",
        endpoint_host=_host(endpoint) if provider.kind in ("openai", "openai_compatible") else None,
        identity=spec.identity,
        dimension=model.dimension,
        capabilities=tuple(model.capabilities),
        provider_enabled=provider.enabled,
        credential_env=provider.credential_env,
        credential_present=(provider.credential_env in env and bool(env.get(provider.credential_env)))
        if provider.credential_env
        else None,
        reachable=reachable,
        reachability_note=note,
    )


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


def _capability_losses(role: str, current: Identity, candidate: Identity) -> list[CapabilityLoss]:
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


# -- pricing ------------------------------------------------------------------------------------


def _pricing(cfg: EngineConfig, ident: Identity, root: Path) -> tuple[Pricing, Any]:
    from rag_engine.providers.pricing import ModelPrice, load_pricing, local_compute, price_key

    if ident.model is None:
        return Pricing(price_key=None, pricing_version=None, known=False, gap="role off: no model, no cost"), None
    model = cfg.model(ident.model)
    if model is None:
        raise ConfigError(f"unknown model {ident.model!r}; configured: {[m.name for m in cfg.models]}")
    # the identity's provider and served model are this model's (see _identity)
    key = price_key(model.pricing_ref, model.provider, model.served_model)
    try:
        table = load_pricing(under_root(root, cfg.pricing_file))
    except ConfigError as exc:
        return Pricing(
            price_key=key, pricing_version=None, known=False, gap=f"cost unknown: pricing file unreadable ({exc})"
        ), None
    provider = cfg.provider(model.provider)
    if provider is not None and local_compute(provider, model):
        free = ModelPrice(input_per_million=Decimal(0), output_per_million=Decimal(0))
        table = table.model_copy(update={"models": {**table.models, key: free}})
    price = table.models.get(key)
    if price is None:
        why = (
            f"no pricing_ref, and no entry {key!r} in {cfg.pricing_file}"
            if model.pricing_ref is None
            else f"pricing_ref {key!r} has no entry in {cfg.pricing_file}"
        )
        return Pricing(
            price_key=key,
            pricing_version=table.version,
            known=False,
            gap=f"cost unknown: {why} (version {table.version})",
        ), table

    def fmt(v: Decimal | None) -> str | None:
        return None if v is None else format(v, "f")

    return Pricing(
        price_key=key,
        pricing_version=table.version,
        known=True,
        input_per_million=fmt(price.input_per_million),
        cached_input_per_million=fmt(price.cached_input_per_million),
        output_per_million=fmt(price.output_per_million),
    ), table


def _cost(table: Any, key: str | None, input_tokens: int, output_tokens: int) -> str | None:
    if table is None or key is None:
        return None
    cost = table.price(key, input_tokens, None, output_tokens)
    return None if cost is None else format(cost.quantize(cost.__class__("0.000001")), "f")


# -- candidate config -----------------------------------------------------------------------------


def _candidate_from_model(cfg: EngineConfig, role: str, candidate: str) -> tuple[EngineConfig, list[str]]:
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


def _diff_role(cur: EngineConfig, cand: EngineConfig, role: str) -> list[str]:
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


def _write_config(cfg: EngineConfig, directory: Path) -> Path:
    path = directory / "candidate-engine.yaml"
    data = cfg.model_dump(mode="json", exclude_defaults=False)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


# -- rollback -------------------------------------------------------------------------------------


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _rollback(engine: Any, role: str, config_path: Path | None, changes: list[str], mode: str) -> Rollback:
    h = config_hash(engine.cfg)
    root = Path(engine.root)
    rel = None
    matches = False
    if config_path is not None and config_path.is_file():
        try:
            rel = str(config_path.resolve().relative_to(root.resolve()))
        except ValueError:
            rel = str(config_path)
        try:
            matches = config_hash(load_config(config_path)) == h
        except RagError:
            matches = False
    notes = []
    undo = "; ".join(c.split(": ", 1)[0] + ": " + c.split(": ", 1)[1].split(" -> ")[0] for c in changes if " -> " in c)
    command = None
    if rel and matches:
        head = _git(root, "rev-parse", "--short=12", "HEAD")
        tracked = _git(root, "ls-files", "--error-unmatch", rel) is not None
        clean = _git(root, "diff", "--quiet", "HEAD", "--", rel) is not None  # exit 0: unchanged
        if head and tracked and clean:
            command = f"git checkout {head} -- {rel}"
        elif head and tracked:
            notes.append(
                f"{rel} has uncommitted edits: copy it aside before applying the candidate (cp {rel} {rel}.rollback)"
            )
        restore = (
            f"in {rel} set back {undo}"
            if mode == "candidate_model" and undo
            else f"keep {rel} as it is (config hash {h}) and point RAG_CONFIG / --config at it again"
        )
    else:
        restore = (
            f"set back {undo} in the engine's config"
            if undo
            else "the running engine's config is not a file on disk; keep it by its hash"
        )
        if rel:
            notes.append(f"the engine's config (hash {h}) differs from {rel}: rollback means that config, not the file")
    if role == "embedding":
        notes.append(
            "`rag reindex --keep-old` keeps the current vector index, so switching back "
            "re-embeds only the chunks activated since"
        )
    return Rollback(config_hash=h, config_file=rel, restore=restore, command=command, notes=tuple(notes))


# -- figures from Neo4j and the ledger ----------------------------------------------------------


def _read(engine: Any, query: str, **params: Any) -> list[dict[str, Any]]:
    import neo4j

    records, _, _ = engine.driver.execute_query(
        query, database_=engine.database, routing_=neo4j.RoutingControl.READ, **params
    )
    return [r.data() for r in records]


def _active_chunks(engine: Any, packs: list[str] | None = None) -> tuple[int, int, list[str]]:
    """(count, total characters of heading + text, a small sample of texts) of the active chunks."""
    where = "WHERE c.pack IN $packs " if packs is not None else ""
    rows = _read(
        engine,
        f"MATCH (c:Chunk {{active: true}}) {where}"
        "RETURN count(c) AS n, "
        "sum(size(coalesce(c.heading, '')) + 1 + size(coalesce(c.text, ''))) AS chars",
        packs=packs or [],
    )
    sample = _read(
        engine,
        f"MATCH (c:Chunk {{active: true}}) {where}RETURN c.text AS text ORDER BY c.chunk_id LIMIT $k",
        packs=packs or [],
        k=SAMPLE_TEXTS,
    )
    return int(rows[0]["n"]), int(rows[0]["chars"] or 0), [r["text"] or "" for r in sample]


def _approx_tokens(chars: int) -> int:
    return math.ceil(chars / 4)


def _measure_embed_rate(
    engine: Any, cand_cfg: EngineConfig, ident: Identity, env: Mapping[str, str], texts: list[str]
) -> tuple[float | None, float | None, str]:
    """(chunks per second, reported input tokens per text, how) from a sample through the candidate."""
    from rag_engine.providers.clients import build_client
    from rag_engine.providers.pricing import pricing_for

    model = cand_cfg.model(ident.model) if ident.model is not None else None
    if model is None:
        raise ConfigError(f"unknown candidate model {ident.model!r}")
    provider = cand_cfg.provider(model.provider)
    if provider is None:
        raise ConfigError(f"model {model.name!r} names unknown provider {model.provider!r}")
    spec = ModelSpec(model=model, provider=provider)
    texts = [t for t in texts if t.strip()] or ["passage: sample text to measure the embedding rate"]
    try:
        pricing = pricing_for(cand_cfg, engine.root)
    except ConfigError:
        pricing = None
    client = build_client(spec, ledger=engine.ledger, pricing=pricing, env=env, root=Path(engine.root), config=cand_cfg)
    started = time.perf_counter()
    result = client.embed(texts, purpose="swap_dry_run", run_id="swap-dry-run")
    seconds = max(time.perf_counter() - started, 1e-6)
    per_text = result.usage.input_tokens / len(texts) if result.usage.input_tokens else None
    return (
        len(texts) / seconds,
        per_text,
        (f"measured: {len(texts)} active chunk texts embedded through the candidate in {seconds:.2f} s"),
    )


def _ledger_embed_rate(engine: Any, ident: Identity, avg_tokens: float) -> tuple[float | None, str]:
    records = [
        r
        for r in engine.ledger.records()
        if r.status == "ok"
        and r.purpose != "query"
        and r.provider == ident.provider
        and r.requested_model == ident.served_model
        and r.input_tokens > 0
        and r.latency_ms > 0
    ]
    if not records:
        return None, "no measured rate: the candidate was not reachable and the ledger has no embedding calls of it"
    tokens = sum(r.input_tokens for r in records)
    seconds = sum(r.latency_ms for r in records) / 1000
    rate = tokens / seconds / max(avg_tokens, 1.0)
    return rate, (
        f"ledger history: {len(records)} embedding calls of the candidate, {tokens} tokens in {seconds:.1f} s"
    )


# -- consequences ---------------------------------------------------------------------------------


def _embedding_consequence(
    engine: Any,
    cand_cfg: EngineConfig,
    current: Identity,
    candidate: Identity,
    env: Mapping[str, str],
    table: Any,
    price_key_: str | None,
    notes: list[str],
    can_call: bool,
) -> Consequence:
    n, chars, sample = _active_chunks(engine)
    avg_tokens = _approx_tokens(chars) / n if n else 0.0
    rate, per_text, how = None, None, ""
    if can_call:
        try:
            rate, per_text, how = _measure_embed_rate(engine, cand_cfg, candidate, env, sample)
        except RagError as exc:
            notes.append(f"sample embedding through the candidate failed: {type(exc).__name__}")
    if rate is None:
        rate, how = _ledger_embed_rate(engine, candidate, avg_tokens or 1.0)
    tokens = round(per_text * n) if per_text else _approx_tokens(chars)
    token_how = "reported by the sample" if per_text else "characters / 4"
    cost = _cost(table, price_key_, tokens, 0)
    cost_note = (
        f"{tokens} input tokens ({token_how}) at the candidate's rate"
        if cost is not None
        else f"cost unknown: the candidate has no price ({tokens} input tokens, {token_how})"
    )
    dim = ""
    if current.dimension != candidate.dimension:
        dim = f"; dimension {current.dimension} -> {candidate.dimension} (a new vector index)"
    seconds = round(n / rate, 1) if rate else None
    return Consequence(
        kind="reindex",
        summary=(
            f"embedder identity changes ({current.identity} -> {candidate.identity}){dim}: full blue/green "
            f"re-index of {n} active chunks before the candidate can serve queries; the eval gate refuses "
            "an embedder change without a complete re-index"
        ),
        chunks=n,
        estimated_seconds=seconds,
        rate_source=how,
        estimated_input_tokens=tokens,
        estimated_cost_usd=cost,
        cost_note=cost_note,
        commands=("RAG_CONFIG=<candidate config> rag reindex --keep-old", "make eval-gate"),
    )


def _extraction_consequence(
    engine: Any, cand_cfg: EngineConfig, current: Identity, candidate: Identity, table: Any, price_key_: str | None
) -> Consequence:
    from rag_engine.providers.estimates import extraction_tokens

    packs = [p.name for p in cand_cfg.enabled_packs if p.extraction]
    n, chars, _ = _active_chunks(engine, packs) if packs else (0, 0, [])
    tokens = extraction_tokens(engine, packs, n, chars)
    how = tokens.source
    est_in: int | None = tokens.input_tokens if n else None
    est_out: int | None = tokens.output_tokens if n else None
    if n:
        cost = _cost(table, price_key_, tokens.input_tokens, tokens.output_tokens)
        cost_note = "at the candidate's rate" if cost is not None else "cost unknown: the candidate has no price"
    else:
        cost = None
        cost_note = "no active chunk of an extracting pack: nothing to re-extract"
    return Consequence(
        kind="reextract",
        summary=(
            f"extraction model identity changes ({current.identity} -> {candidate.identity}): the extraction "
            f"cache is keyed by it, so {n} active chunks of {', '.join(packs) or 'no pack'} are re-extracted, "
            "then graph_writes and an eval"
        ),
        chunks=n,
        rate_source=how,
        estimated_input_tokens=est_in,
        estimated_output_tokens=est_out,
        estimated_cost_usd=cost,
        cost_note=cost_note,
        commands=("RAG_CONFIG=<candidate config> rag ingest", "make eval-gate"),
    )


def _generation_consequence(current: Identity, candidate: Identity) -> Consequence:
    return Consequence(
        kind="eval_required",
        summary=(
            f"generation model changes ({current.identity} -> {candidate.identity}): an eval answered by the "
            "candidate must pass the gate before it becomes the default (gate rule "
            "generation_changed_without_eval fails an extractive or stale report)"
        ),
        commands=(
            "RAG_CONFIG=<candidate config> python -m evals.runner --config <candidate config> --generate "
            "--output var/eval/candidate.json",
            "python -m evals.gates --config <candidate config> --report var/eval/candidate.json "
            "--baseline-report evals/reports/BASELINE.json --output var/eval/gate.json",
        ),
    )


# -- load check -----------------------------------------------------------------------------------

_LOAD = """
import json, os, sys
try:
    from rag_engine.engine import Engine
    eng = Engine.from_path(os.environ["RAG_CONFIG"])
    _ = eng.packs, eng.registry.generation, eng.registry.embedding, eng.registry.extraction
    if eng.broken_packs:  # the engine leaves a broken pack out; a candidate config must load them all
        raise next(iter(eng.broken_packs.values()))
    import rag_assets.definitions as d
    _ = d.defs
    print(json.dumps({"ok": True}))
except BaseException as exc:
    print(json.dumps({"ok": False, "error": type(exc).__name__ + ": " + str(exc)[:2000]}))
"""


def _redact_values(text: str, env: Mapping[str, str], names: set[str]) -> str:
    for name in names:
        value = env.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def load_check(
    cand_path: Path, root: Path, env: Mapping[str, str], secret_names: set[str], timeout_s: float = LOAD_TIMEOUT_S
) -> LoadCheck:
    """Load the engine and ``rag_assets.definitions`` with the candidate config in a fresh interpreter."""
    child = {
        **os.environ,
        **{k: v for k, v in env.items() if isinstance(v, str)},
        "RAG_CONFIG": str(cand_path),
        "RAG_ROOT": str(root),
    }
    for name in secret_names:
        if not child.get(name):
            child[name] = PLACEHOLDER
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-c", _LOAD], cwd=root, env=child, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return LoadCheck(
            ok=False,
            seconds=round(time.perf_counter() - started, 1),
            error=f"loading did not finish within {timeout_s:.0f} s",
        )
    seconds = round(time.perf_counter() - started, 1)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        result = {"ok": False, "error": f"exit {done.returncode}: " + " | ".join(tail)}
    error = result.get("error")
    if error:
        error = _redact_values(error, child, secret_names).replace(PLACEHOLDER, "<placeholder>")
    return LoadCheck(ok=bool(result.get("ok")), seconds=seconds, error=error)


# -- the dry run ------------------------------------------------------------------------------------


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
        cand_cfg, changes = _candidate_from_model(cfg, role, candidate)
        mode, cand_file = "candidate_model", None
    else:
        assert candidate_config is not None, "exactly one of candidate / candidate_config is set (checked above)"
        cand_path = under_root(root, candidate_config)
        cand_cfg = load_config(cand_path)
        changes = _diff_role(cfg, cand_cfg, role)
        mode, cand_file = "candidate_config", str(candidate_config)
        name = role_model(cand_cfg, role)
        named = cand_cfg.model(name) if name is not None else None
        if name is not None and (named is None or named.role not in MODEL_ROLE[role]):
            raise ConfigError(
                f"{candidate_config}: the {role} model {name!r} is not a configured "
                f"{' or '.join(MODEL_ROLE[role])} model"
            )

    current = _identity(cfg, role_model(cfg, role), env, root, probe=False)
    cand = _identity(cand_cfg, role_model(cand_cfg, role), env, root, probe=True)
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
                f"{_redact_values(str(exc), env, _secret_names(cfg, cand_cfg))}"
            )

    losses = _capability_losses(role, current, cand)
    for loss in losses:
        if loss.blocking:
            reasons.append(f"capability loss: {cand.model} lacks {loss.capability} ({loss.uses}): {loss.effect}")
        else:
            notes.append(f"{cand.model} lacks {loss.capability}: {loss.effect}")
    if role == "local_inference" and cand.model is None:
        notes.append("the candidate turns local inference off: queries skip expansion and rerank")

    pricing_cur, _ = _pricing(cfg, current, root)
    pricing_cand, table = _pricing(cand_cfg, cand, root)

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
            _embedding_consequence(engine, cand_cfg, current, cand, env, table, pricing_cand.price_key, notes, can_call)
        )
    elif role == "extraction":
        consequences.append(_extraction_consequence(engine, cand_cfg, current, cand, table, pricing_cand.price_key))
    elif role == "generation":
        consequences.append(_generation_consequence(current, cand))
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
    rollback = _rollback(engine, role, under_root(root, cfg_path), changes, mode)

    with tempfile.TemporaryDirectory(prefix="rag-swap-") as tmp:
        cand_path = _write_config(cand_cfg, Path(tmp))
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
    """The current and the candidate generation model's quality-per-dollar rows (each priced by its
    own config), when both have an eval report; else a note naming the missing report."""
    from rag_engine.ops.quality_per_dollar import latest_reports, ledger_usage, rows_for
    from rag_engine.providers.ledger import UsageLedger, ledger_url

    ledger = UsageLedger(ledger_url(cfg, env, root))
    try:
        usage = ledger_usage(ledger)
    finally:
        ledger.dispose()
    reports = latest_reports(cfg, root)
    cur = rows_for(cfg, root, [current], usage, reports)[0]
    cand = rows_for(cand_cfg, root, [candidate], usage, reports)[0]
    missing = [r.model for r in (cur, cand) if r.report is None]
    if missing:
        notes.append(
            f"quality per dollar: no eval report answered by {' or '.join(missing)}; run "
            "`python -m evals.runner --config <config naming it> --generate --output var/eval/<model>.json` "
            "to compare the rows"
        )
        return ()
    return (cur, cand)


def _secret_names(*cfgs: EngineConfig) -> set[str]:
    return {p.credential_env for c in cfgs for p in c.providers if p.credential_env}


# -- text -------------------------------------------------------------------------------------------


def _ident_lines(label: str, i: Identity) -> list[str]:
    if i.model is None:
        return [f"{label}: none (role off)"]
    cred = (
        "no credential needed"
        if i.credential_env is None
        else f"credential {i.credential_env}: {'present' if i.credential_present else 'MISSING'}"
    )
    where = f", endpoint {i.endpoint_host}" if i.endpoint_host else (f", {i.kind}" if i.kind else "")
    reach = f"; {i.reachability_note}" if i.reachability_note else ""
    return [
        f"{label}: {i.model} = {i.provider}/{i.served_model} ({i.mode}{where})",
        f"  identity {i.identity}; {cred}{reach}",
        f"  capabilities: {', '.join(i.capabilities) or '-'}",
    ]


def _price_line(label: str, p: Pricing) -> str:
    if p.known:
        cached = f", cached input {p.cached_input_per_million}" if p.cached_input_per_million else ""
        return (
            f"{label}: {p.price_key} input {p.input_per_million}{cached}, output {p.output_per_million} "
            f"USD per million tokens (pricing {p.pricing_version})"
        )
    return f"{label}: {p.gap}"


def render_text(report: SwapReport) -> str:
    r = report
    lines = [
        f"provider swap dry run: role {r.role} — status {r.status.upper()}",
        f"application_code_change_required: {str(r.application_code_change_required).lower()} "
        f"(engine + Dagster Definitions loaded with the candidate config in {r.load_check.seconds} s"
        + ("" if r.load_check.ok else f": {r.load_check.error}")
        + ")",
    ]
    if r.candidate_config_file:
        lines.append(f"candidate config: {r.candidate_config_file}")
    lines.append("changes: " + ("; ".join(r.changes) if r.changes else "none for this role"))
    lines += _ident_lines("current  ", r.current) + _ident_lines("candidate", r.candidate)
    lines.append("capability losses:" + (" none" if not r.capability_losses else ""))
    for loss in r.capability_losses:
        lines.append(f"  - {loss.capability} ({loss.uses}){' [blocking]' if loss.blocking else ''}: {loss.effect}")
    lines.append("pricing:")
    lines.append("  " + _price_line("current  ", r.pricing_current))
    lines.append("  " + _price_line("candidate", r.pricing_candidate))
    lines.append("consequences:")
    for c in r.consequences:
        lines.append(f"  - {c.summary}")
        if c.chunks is not None:
            eta = f"~{c.estimated_seconds:.0f} s" if c.estimated_seconds is not None else "time unknown"
            if c.kind == "reindex":
                lines.append(f"    {c.chunks} chunks, {eta} ({c.rate_source})")
            else:
                lines.append(f"    {c.chunks} chunks ({c.rate_source})")
        if c.estimated_input_tokens is not None or c.cost_note:
            toks = ""
            if c.estimated_input_tokens is not None:
                toks = f"~{c.estimated_input_tokens} input tokens"
                if c.estimated_output_tokens is not None:
                    toks += f" + ~{c.estimated_output_tokens} output tokens"
                toks += "; "
            cost = f"~{c.estimated_cost_usd} USD ({c.cost_note})" if c.estimated_cost_usd is not None else c.cost_note
            lines.append(f"    {toks}{cost}")
        for cmd in c.commands:
            lines.append(f"    $ {cmd}")
    rb = r.rollback
    lines.append(f"rollback: current config hash {rb.config_hash}" + (f" ({rb.config_file})" if rb.config_file else ""))
    lines.append(f"  restore: {rb.restore}")
    if rb.command:
        lines.append(f"  $ {rb.command}")
    for n in rb.notes:
        lines.append(f"  note: {n}")
    if r.quality_per_dollar:
        from rag_engine.ops.quality_per_dollar import ROW_HEADERS, row_cells

        lines.append("quality per dollar (current, then candidate):")
        lines.append("  " + " | ".join(ROW_HEADERS))
        lines += ["  " + " | ".join(row_cells(q)) for q in r.quality_per_dollar]
        lines += [f"  note: {q.model}: {n}" for q in r.quality_per_dollar for n in q.notes]
    if r.reasons:
        lines.append("blocked because:")
        lines += [f"  - {x}" for x in r.reasons]
    if r.notes:
        lines.append("notes:")
        lines += [f"  - {x}" for x in r.notes]
    return "\n".join(lines)
