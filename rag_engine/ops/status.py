"""`rag status`: the system on one screen, from what is already recorded (no model call, no write).

Config hash; the active embedder against the one that built the index (IndexMeta) and how many
current chunks the vector index holds (a stored vector it leaves out does not count); per
enabled pack the corpus, current documents and chunks; every pack present in the store, enabled
or not (one that is not enabled is never served); graph quality with the blocking checks
first (the same counts and verdicts as the graph_quality asset);
the latest eval gate file (``make eval-gate``'s or the Dagster check's, whichever is newer); spend
by model over the last day and all time (usage ledger); and, when DAGSTER_HOME is set, the
automation state read from the instance's SQLite files (never by importing Dagster: the engine does
not depend on it). With Neo4j unreachable the rest is still collected (``store`` says why).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Mapping
from contextlib import closing
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from rag_engine.config import config_hash
from rag_engine.engine import Engine
from rag_engine.errors import LedgerUnavailable, StoreUnavailable
from rag_engine.graph.quality import quality_report
from rag_engine.ingest.documents import discover
from rag_engine.store import status as store_status
from rag_engine.store.connection import check_reachable, store_unreachable
from rag_engine.store.schema import EMBEDDING_PROPERTY, current_embedder

BLOCKING_CHECKS = {
    "no_orphan_entities": "orphan_entities",
    "no_dangling_edges": "dangling_edges",
    "no_missing_provenance": "missing_provenance",
    "no_key_conflicts": "key_conflicts",
}
"""Graph quality checks that fail a run (ERROR, blocking); the graph_quality asset uses the same."""
WARNING_CHECKS = {"no_stale_versions": "stale_versions"}


def stored_packs(engine: Engine) -> list[dict[str, Any]]:
    """Every pack present in the store (documents, chunks, current chunks), each marked enabled or
    not: a pack that is not enabled is never served (``store.reads.SERVED``), but it is shown here
    so an operator sees what the store holds (a fixture left behind, a pack turned off)."""
    records = store_status.stored_packs(engine.driver, engine.database)
    return [
        {
            "pack": r["pack"],
            "enabled": r["pack"] in engine.packs,
            "documents": int(r["documents"]),
            "chunks": int(r["chunks"]),
            "active_chunks": int(r["active"]),
        }
        for r in records
    ]


def quality_checks(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The report's checks as rows, blocking first: name, severity, count, passed."""
    rows = [
        {
            "check": name,
            "severity": "blocking",
            "count": int(report[field]["count"]),
            "passed": int(report[field]["count"]) == 0,
        }
        for name, field in BLOCKING_CHECKS.items()
    ]
    rows += [
        {
            "check": name,
            "severity": "warning",
            "count": int(report[field]["count"]),
            "passed": int(report[field]["count"]) == 0,
        }
        for name, field in WARNING_CHECKS.items()
    ]
    latest = report.get("latest_run")
    rows.append(
        {
            "check": "latest_extraction_run",
            "severity": "warning",
            "count": None,
            "passed": latest is None or latest.get("status") == "complete",
        }
    )
    return rows


def blocking_failures(report: Mapping[str, Any]) -> list[str]:
    return [r["check"] for r in quality_checks(report) if r["severity"] == "blocking" and not r["passed"]]


def _store(engine: Engine) -> dict[str, Any]:
    packs = sorted(engine.packs)
    meta = current_embedder(engine.driver, engine.database)
    prop = meta["property"] if meta else EMBEDDING_PROPERTY  # the active index's vectors (blue/green)
    records = store_status.pack_counts(
        engine.driver,
        engine.database,
        packs,
        prop=prop,
        dim=meta["dimension"] if meta else 0,
        legacy=prop == EMBEDDING_PROPERTY,
        identity=meta["identity"] if meta else None,
    )
    counts = {r["pack"]: {**dict(r), "embedded": int(r["embedded"] or 0)} for r in records}
    active = engine.embedder_identity
    chunks = sum(c["chunks"] for c in counts.values())
    embedded = sum(c["embedded"] for c in counts.values())
    unindexable = sum(int(c["unindexable"] or 0) for c in counts.values())
    if meta is None:
        state = "no index: run `rag ingest`"
    elif meta["identity"] != active:
        state = f"built by another embedder ({meta['identity']}): run `rag reindex`"
    elif embedded < chunks:
        state = f"{chunks - embedded} current chunk(s) not in the vector index"
        state += (
            f" ({unindexable} with a vector it leaves out: zero, not finite or of another dimension): "
            "run `rag ingest --force`"
            if unindexable
            else ": run `rag ingest`"
        )
    else:
        state = "ok"
    report = quality_report(engine.driver, engine.database, packs)
    return {
        "counts": counts,
        "index": {
            "active_identity": active,
            "index_identity": meta and meta["identity"],
            "dimension": meta and meta["dimension"],
            "chunks": chunks,
            "embedded": embedded,
            "unindexable": unindexable,
            "state": state,
        },
        "quality": {
            "checks": quality_checks(report),
            "blocking_failures": blocking_failures(report),
            "graph_size": report["graph_size"],
            "latest_run": report["latest_run"],
        },
    }


def _gate(engine: Engine) -> dict[str, Any] | None:
    """The newest gate.json among evals.gate_dirs (the Makefile's var/eval) and evals.reports_dir
    (where the Dagster check eval_report:eval_gate writes each result): what the UI's check shows."""
    candidates = engine.cfg.evals.gate_files(engine.root)
    found = sorted((p for p in candidates if p.is_file()), key=lambda p: p.stat().st_mtime, reverse=True)
    if not found:
        return None
    path = found[0]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return {
            "path": str(path.relative_to(engine.root)) if path.is_relative_to(engine.root) else path.name,
            "status": "unreadable",
            "reasons": [str(exc)],
        }
    return {
        "path": str(path.relative_to(engine.root)) if path.is_relative_to(engine.root) else path.name,
        "status": data.get("status"),
        "recorded_by": data.get("recorded_by") or "python -m evals.gates (make eval-gate)",
        "exit_code": data.get("exit_code"),
        "reasons": list(data.get("reasons") or [])[:5],
        "at": datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat(timespec="seconds"),
    }


def _spend(engine: Engine) -> dict[str, Any]:
    """Calls and cost per requested model, over the last day and all time; unknown cost stays unknown."""
    since = datetime.now(UTC) - timedelta(days=1)
    out: dict[str, dict[str, Any]] = {}
    try:
        records = engine.ledger.records()
    finally:
        if "ledger" in engine.__dict__:
            engine.ledger.dispose()
    for rec in records:
        at = rec.created_at if rec.created_at.tzinfo else rec.created_at.replace(tzinfo=UTC)
        row = out.setdefault(
            rec.requested_model,
            {
                "model": rec.requested_model,
                "provider": rec.provider,
                "day": {"calls": 0, "cost": Decimal(0), "unknown_cost_calls": 0},
                "all": {"calls": 0, "cost": Decimal(0), "unknown_cost_calls": 0},
            },
        )
        for window in ("all", "day") if at >= since else ("all",):
            w = row[window]
            w["calls"] += 1
            if rec.cost is None:
                w["unknown_cost_calls"] += 1
            else:
                w["cost"] += rec.cost
    for row in out.values():  # as `rag costs`: a total with an unknown part is unknown, never a low number
        for window in ("day", "all"):
            w = row[window]
            w["known_cost"] = format(w["cost"], "f")
            w["cost"] = None if w["unknown_cost_calls"] else w["known_cost"]
    return {"models": sorted(out.values(), key=lambda r: r["model"])}


def _spend_or_why(engine: Engine) -> dict[str, Any]:
    """``_spend``, or no rows and the one line saying why when the ledger database cannot be reached
    (the rest of the status does not depend on it)."""
    try:
        return _spend(engine)
    except LedgerUnavailable as exc:
        return {"models": [], "error": f"{type(exc).__name__}: {exc}"}


DEFAULT_DAGSTER_HOME = Path("var") / "dagster_home"
"""Where `make demo` / `make dev` keep the Dagster instance (the Makefile's DAGSTER_HOME), under
the project root: `rag status` reads it when DAGSTER_HOME is not set in the caller's shell."""

ON = ("RUNNING", "DECLARED_IN_CODE", "AUTOMATICALLY_RUNNING")
"""Instigator states that mean "on". Dagster stores DECLARED_IN_CODE (its older name:
AUTOMATICALLY_RUNNING) for a sensor or schedule whose code declares it running and nobody toggled; one
stopped by hand is STOPPED, one started by hand RUNNING."""


def _instigator_name(body: str | None) -> str | None:
    """The sensor or schedule name in a stored InstigatorState: under ``origin`` (serialized as
    an ExternalJobOrigin, so the field is ``job_name``; ``instigator_name`` in newer layouts)."""
    if not body:
        return None
    data = json.loads(body)
    origin = data.get("origin") or {}
    return data.get("name") or origin.get("instigator_name") or origin.get("job_name")


def _automation(env: Mapping[str, str], root: Path | None = None) -> dict[str, Any] | None:
    """Schedules and sensors (on/off) and the latest runs, from a SQLite Dagster instance:
    DAGSTER_HOME, else the project's own ``var/dagster_home`` when it holds an instance."""
    home = env.get("DAGSTER_HOME")
    source = "DAGSTER_HOME"
    if not home and root is not None and (root / DEFAULT_DAGSTER_HOME / "dagster.yaml").is_file():
        home, source = str(root / DEFAULT_DAGSTER_HOME), "project default"
    if not home:
        return None
    base = Path(home)
    out: dict[str, Any] = {"dagster_home": base.name, "source": source, "instigators": [], "runs": []}
    schedules, runs = base / "schedules" / "schedules.db", base / "history" / "runs.db"
    if not schedules.is_file() and not runs.is_file():
        out["note"] = "no local run or schedule storage (not started yet, or a Postgres instance: see the UI)"
        return out
    try:
        if schedules.is_file():
            with closing(sqlite3.connect(f"file:{schedules}?mode=ro", uri=True, timeout=1)) as db:
                for body, status in db.execute("SELECT instigator_body, status FROM instigators"):
                    out["instigators"].append({"name": _instigator_name(body), "status": status, "on": status in ON})
        if runs.is_file():
            with closing(sqlite3.connect(f"file:{runs}?mode=ro", uri=True, timeout=1)) as db:
                for run_id, job, status, updated in db.execute(
                    "SELECT run_id, pipeline_name, status, update_timestamp FROM runs "
                    "ORDER BY update_timestamp DESC LIMIT 5"
                ):
                    out["runs"].append({"run_id": run_id[:8], "job": job, "status": status, "updated": str(updated)})
    except (sqlite3.Error, ValueError) as exc:  # another Dagster version's layout: say so, don't fail status
        out["note"] = f"instance storage not readable ({type(exc).__name__})"
    return out


def _reachable_store(engine: Engine) -> tuple[dict[str, Any] | None, list[dict[str, Any]] | None, str | None]:
    """(the store's figures, the packs it holds, None), or (None, None, why) when Neo4j cannot be
    reached: probed first within the connect timeout, and a store lost while reading is the same."""
    try:
        check_reachable(engine.driver, engine.neo4j_target)
        return _store(engine), stored_packs(engine), None
    except StoreUnavailable as exc:
        return None, None, str(exc)
    except Exception as exc:
        gone = store_unreachable(exc)
        if gone is None:
            raise
        return None, None, f"Neo4j stopped answering at {engine.neo4j_target.shown_uri} ({type(gone).__name__})"


def collect_status(engine: Engine, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Everything `rag status` shows. With Neo4j unreachable, what lives elsewhere is still shown
    (config, corpus files, the eval gate, spend, automation); ``store`` says it is unreachable and
    why, and what only the store knows (index, document and chunk counts, graph quality) is None."""
    env = os.environ if env is None else env
    store, stored, unreachable = _reachable_store(engine)
    packs = []
    for name, pack in sorted(engine.packs.items()):
        c = store["counts"].get(name, {}) if store else {}
        packs.append(
            {
                "pack": name,
                "domain": pack.entry.domain,
                "extraction": pack.entry.extraction,
                "corpus_documents": len(discover(pack)),
                **{k: (c.get(k, 0) if store else None) for k in ("documents", "chunks", "embedded")},
            }
        )
    return {
        "config_hash": config_hash(engine.cfg),
        "store": {"reachable": unreachable is None, "address": engine.neo4j_target.shown_uri, "error": unreachable},
        "embedder": store["index"] if store else None,
        "packs": packs,
        "stored_packs": stored,
        "broken_packs": {name: f"{type(exc).__name__}: {exc}" for name, exc in sorted(engine.broken_packs.items())},
        "quality": store["quality"] if store else None,
        "eval_gate": _gate(engine),
        "spend": _spend_or_why(engine),
        "automation": _automation(env, Path(engine.root)),
    }
