"""The answer quality eval reports record, per answerer: the newest report each generation model
(or the engine's extractive answer) answered in, and there the share of its answers to questions
with a known fact that state the fact (``evals.answer_metrics``: "fact stated"). The quality side
of quality per dollar (``rag_engine.ops.quality_per_dollar``)."""

from __future__ import annotations

import json
import logging
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from rag_engine.config import EngineConfig, under_root

log = logging.getLogger(__name__)

EXTRACTIVE = ("none", "extractive")
"""(provider, model) of an eval run that answered without a model."""


class ReportSummary(BaseModel):
    """One answerer's answers in one eval report."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    provider: str
    """Who answered: the generation provider, or ``none`` for the engine's extractive answers."""
    model: str
    answered_as: tuple[str, ...] = ()
    created_at: datetime
    golden_hash: str | None
    answers: int
    fact_questions: int
    fact_stated_rate: float | None


def _answerer(query: dict[str, Any], generation: dict[str, Any]) -> tuple[str, str] | None:
    """Who wrote a report query's answer: the generation model, the extractive answer, or nobody
    (decided before any call, a failed call, or a report that does not say)."""
    method = query.get("answer_method")
    if method == "model":
        return str(generation["provider"]), str(generation["model"])
    if method == "extractive" and not query.get("answer_error"):
        return EXTRACTIVE
    return None


def _report(path: Path, root: Path) -> list[ReportSummary]:
    """The report's answerers, each with the fact-stated rate of the answers it wrote."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("rag-eval-report/"):
        return []  # a gate result, an acceptance, anything else
    gen = data.get("generation") or {}
    if gen.get("failed") or gen.get("failures"):  # fallback answers do not measure the model (generation_failed)
        log.info("eval report %s skipped: some answers were not the model's", path)
        return []
    try:
        created = datetime.fromisoformat(str(data["created_at"]).replace("Z", "+00:00"))
        shown = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
        by: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for q in data.get("queries") or []:
            who = _answerer(q, gen)
            if who is not None:
                by.setdefault(who, []).append(q)
        out = []
        for (provider, model), answered in sorted(by.items()):
            facts = [bool(q["fact_stated"]) for q in answered if q.get("fact_stated") is not None]
            out.append(
                ReportSummary(
                    path=shown,
                    provider=provider,
                    model=model,
                    answered_as=tuple(gen.get("reported_models") or ()) if (provider, model) != EXTRACTIVE else (),
                    created_at=created,
                    golden_hash=(data.get("golden") or {}).get("hash"),
                    answers=len(answered),
                    fact_questions=len(facts),
                    fact_stated_rate=round(sum(facts) / len(facts), 4) if facts else None,
                )
            )
        return out
    except (KeyError, TypeError, ValueError) as exc:
        log.warning("eval report %s skipped: %s", path, type(exc).__name__)
        return []


def latest_reports(cfg: EngineConfig, root: str | Path) -> dict[tuple[str, str], ReportSummary]:
    """The newest eval report per answerer (generation provider and model, or the extractive answer)
    in the configured report dirs, with that answerer's answers in it; a report where some model
    calls failed (answered by the extractive fallback) does not count."""
    root = Path(root)
    dirs = dict.fromkeys(under_root(root, d) for d in (*cfg.costs.report_dirs, cfg.evals.reports_dir))
    newest: dict[tuple[str, str], ReportSummary] = {}
    for d in dirs:
        for path in sorted(d.glob("*.json")) if d.is_dir() else ():
            for rep in _report(path, root):
                key = (rep.provider, rep.model)
                if key not in newest or rep.created_at > newest[key].created_at:
                    newest[key] = rep
    return newest
