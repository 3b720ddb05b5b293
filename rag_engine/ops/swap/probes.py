"""What the dry run finds out from outside the config: the candidate server, the store, the ledger
and a fresh interpreter.

Each model's identity (with a reachability probe of a local endpoint and the credential variable's
presence), the active chunks counted in Neo4j, an embedding rate measured through the candidate or
read from the ledger, and the load check, which imports the engine and the Dagster Definitions
with the candidate config in a child process. Everything here reads; the only model call is the
optional embedding sample, recorded in the ledger like any other.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rag_engine.config import EngineConfig, under_root
from rag_engine.errors import ConfigError
from rag_engine.ops.swap.report import Identity, LoadCheck
from rag_engine.providers.registry import ModelSpec, credential_present, resolve_endpoint

SAMPLE_TEXTS = 8
"""Passages embedded through a reachable candidate embedder to measure its rate."""
LOAD_TIMEOUT_S = 300.0
"""Seconds the candidate-config load check (engine + Dagster Definitions) may take."""
CONNECT_TIMEOUT_S = 3.0
PLACEHOLDER = "swap-dry-run-placeholder"
"""Stands in for a missing credential in the load check only (the registry checks presence; the
missing variable is reported as a blocking reason on its own)."""


# -- identity and reachability --------------------------------------------------------------------


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


def identity(cfg: EngineConfig, model_name: str | None, env: Mapping[str, str], root: Path, *, probe: bool) -> Identity:
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
        credential_present=credential_present(env, provider.credential_env) if provider.credential_env else None,
        reachable=reachable,
        reachability_note=note,
    )


# -- figures from Neo4j and the ledger ----------------------------------------------------------


def active_chunks(engine: Any, packs: list[str] | None = None) -> tuple[int, int, list[str]]:
    """(count, total characters of heading + text, a small sample of texts) of the active chunks."""
    from rag_engine.store.status import active_size

    return active_size(engine.driver, engine.database, packs, SAMPLE_TEXTS)


def measure_embed_rate(
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


def ledger_embed_rate(engine: Any, ident: Identity, avg_tokens: float) -> tuple[float | None, str]:
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


def redact_values(text: str, env: Mapping[str, str], names: set[str]) -> str:
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
        error = redact_values(error, child, secret_names).replace(PLACEHOLDER, "<placeholder>")
    return LoadCheck(ok=bool(result.get("ok")), seconds=seconds, error=error)
