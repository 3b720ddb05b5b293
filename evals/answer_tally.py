"""How the generation model answered an eval run's queries (``evals.runner``): by the model,
decided before any call, or failed by error type (the engine then answers extractively, which the
report must say and the gate fails on)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from rag_engine.retrieval.answer import Answer

NO_MODEL = "NoGenerationModel"
"""The failure recorded when no usable generation model answered (none configured, or unbuildable)."""


class AnswerTally:
    """How the generation model answered the run's queries: answered, decided before any call,
    or failed (by error type; the engine then answers extractively, which the report must say)."""

    def __init__(self) -> None:
        self.model_answers = 0
        self.no_call = 0
        self.extractive = 0
        self.failures: Counter[str] = Counter()
        self.failed_ids: list[str] = []
        self.reported: set[str] = set()

    def add(self, query_id: str, answer: Answer, reported_models: Sequence[str | None]) -> None:
        if answer.method == "model":
            self.model_answers += 1
            self.reported.update(m for m in reported_models if m)
        elif answer.method == "none":  # empty context or low evidence: no call was due
            self.no_call += 1
        elif answer.fallback == "no_recording":  # the replay holds none: the engine's own answer, by design
            self.extractive += 1
        else:  # extractive: the model call failed, or no usable generation model (never silent)
            self.failures[answer.error_type or NO_MODEL] += 1
            self.failed_ids.append(query_id)

    def warning(self) -> str | None:
        """The loud line a run with failed model calls prints (the gate then fails on it)."""
        if not self.failures:
            return None
        kinds = ", ".join(f"{kind} x{n}" for kind, n in sorted(self.failures.items()))
        hint = (
            " (no recorded answer for these requests: a prompt, context or corpus change; re-record with "
            "python -m evals.cassettes.build_demo_cassette --answers)"
            if "ReplayMiss" in self.failures
            else ""
        )
        ids = ", ".join(self.failed_ids[:5]) + (" ..." if len(self.failed_ids) > 5 else "")
        return (
            f"[eval] GENERATION FAILED for {len(self.failed_ids)} queries: {kinds}{hint}; "
            f"answered extractively, so the report does not measure the model: {ids}"
        )

    def info(self) -> dict[str, Any]:
        return {
            "reported_models": sorted(self.reported),
            "model_answers": self.model_answers,
            "no_call": self.no_call,
            "extractive": self.extractive,
            "failures": dict(sorted(self.failures.items())),
        }
