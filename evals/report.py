"""The eval report (schema ``rag-eval-report/2``): the one file the runner writes and the gate reads.

The report is the contract between two processes that may run months apart (the committed
BASELINE.json and tonight's candidate), so it is validated strictly on the way in: unknown keys,
out-of-range metrics and a foreign schema are errors with the offending location, never
silently dropped fields. Metric names contain ``@``, which is not a Python identifier: the
models use ``recall_at_5``-style attributes with the JSON names as aliases; always dump with
``to_json()`` (or ``by_alias=True``) so the file keeps the documented keys.

Schema ``/2`` adds ``map@10`` (aggregate and per query), the ``retrieval`` settings the engine ran
with (per-leg weights, k), the per-pack ``systems`` table (the engine, BM25, and the engine's
fulltext and dense legs alone, scored on the same chunks and questions) and the baselines'
per-query top-10 ``rankings``. ``/1`` files (e.g. an older committed baseline) stay readable:
their ``map@10`` is None and they have no systems table.

Optional in ``/2`` (absent from an older runner's report): how the generation model answered
(``generation.reported_models``, ``model_answers``, ``no_call``, ``failures`` by error type) and per
query ``answer_method`` / ``answer_error``, so a failed model call (a replay miss) is in the report
rather than hidden behind the extractive fallback.

Also optional: the eval's ``run_id`` (the run its model calls and audit records carry, actor
``eval``), and per query ``tokens_estimated`` with its count ``metrics.estimated_cost_queries``: a
query whose token counts no provider reported (a replay fixture's characters / 4) has an estimated
cost, and the report says so.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rag_engine.errors import EvalInputError

SCHEMA: Final = "rag-eval-report/2"
SCHEMA_V1: Final = "rag-eval-report/1"
SCHEMAS = (SCHEMA_V1, SCHEMA)
"""Schemas ``parse_report`` accepts; the runner writes ``SCHEMA``."""

TOP_K = 10
"""The ranked list in a report holds at most this many anchors (all @k metrics are k <= 10)."""

METRIC_NAMES: tuple[str, ...] = (
    "recall@1",
    "recall@5",
    "recall@10",
    "mrr@10",
    "ndcg@10",
    "map@10",
    "citation_hit_rate",
    "insufficient_evidence_accuracy",
)
"""Quality metrics: aggregated in ``metrics`` and gateable (higher is better for all of them)."""

QUERY_FIELD: dict[str, str] = {
    "recall@1": "recall@1",
    "recall@5": "recall@5",
    "recall@10": "recall@10",
    "mrr@10": "mrr@10",
    "ndcg@10": "ndcg@10",
    "map@10": "map@10",
    "citation_hit_rate": "citation_hit",
    "insufficient_evidence_accuracy": "insufficient_correct",
}
"""Aggregate metric name -> the per-query key whose mean it is."""

RANKING_NAMES: tuple[str, ...] = ("recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10", "map@10")
"""Per-query ranking metrics: null for queries expected to have no answer."""

SYSTEMS: tuple[str, ...] = ("engine", "bm25", "fulltext", "dense")
"""Systems scored per pack: the engine (full query path), BM25 over the pack's active chunks,
and the engine's fulltext and dense legs alone."""

BASELINE_SYSTEMS: tuple[str, ...] = SYSTEMS[1:]

VARIANTS: tuple[str, ...] = ("engine_no_graph", "engine_no_rerank", "engine_no_sentences", "rrf", "bm25_stemmed")
"""Systems scored beside the engine, optional in a report (older reports lack them): ablations of
the engine (the graph leg's weight at 0, the feature reranker off, no sentence evidence, plain RRF
of the legs) and BM25 with Snowball English stems (shown; the gated floor is ``bm25``)."""

Unit = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Millis = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
NonEmpty = Annotated[str, Field(min_length=1)]


def _usd(value: str | None) -> str | None:
    """Money stays exact decimal text; None means unknown (never zero)."""
    if value is None:
        return None
    try:
        amount = Decimal(value)
    except (InvalidOperation, TypeError, ValueError):
        raise ValueError(f"not a decimal amount: {value!r}") from None
    if not amount.is_finite() or amount < 0:
        raise ValueError(f"must be a finite, non-negative amount: {value!r}")
    return value


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class GoldenRef(_Frozen):
    paths: tuple[NonEmpty, ...] = Field(min_length=1)
    hash: Sha256
    """sha256 over the golden files' bytes, concatenated in ``paths`` order."""


class GenerationInfo(_Frozen):
    """A generation model (provider and served model); for the model that answered an eval, also
    what it answered: the fields below are absent from an older runner's report and from
    ``configured_generation``."""

    provider: NonEmpty
    model: NonEmpty
    reported_models: tuple[NonEmpty, ...] | None = None
    """The models the provider said answered (sorted): a live model's version, or a cassette's
    fixture label. Part of the generation identity: a re-recorded cassette answers as another model."""
    model_answers: int | None = Field(None, ge=0)
    """Queries the model answered (insufficient-evidence verdicts included)."""
    no_call: int | None = Field(None, ge=0)
    """Queries decided before any model call (empty context or low evidence coverage)."""
    extractive: int | None = Field(None, ge=0)
    """Queries the engine answered extractively because the replay holds no recording for them
    (by design: the engine's own answer; not a failure)."""
    failures: dict[NonEmpty, Annotated[int, Field(ge=1)]] | None = None
    """Error type -> queries whose model call failed (e.g. ``ReplayMiss``: the cassette has no answer
    for the request); the engine answered those extractively, so the report does not measure the model."""

    def identity(self) -> str:
        """What the gate compares: provider/model, and the reported models when recorded."""
        reported = f" (answered as {', '.join(self.reported_models)})" if self.reported_models else ""
        return f"{self.provider}/{self.model}{reported}"

    @property
    def failed(self) -> int:
        return sum((self.failures or {}).values())


class EmbedderInfo(_Frozen):
    provider: NonEmpty
    model: NonEmpty
    dimension: int = Field(ge=1)
    identity: NonEmpty


class ReindexInfo(_Frozen):
    """What the chunk index the report queried was fully built with."""

    embedder_identity: NonEmpty
    complete: bool


class ReportMetrics(_Frozen):
    recall_at_1: Unit | None = Field(alias="recall@1")
    recall_at_5: Unit | None = Field(alias="recall@5")
    recall_at_10: Unit | None = Field(alias="recall@10")
    mrr_at_10: Unit | None = Field(alias="mrr@10")
    ndcg_at_10: Unit | None = Field(alias="ndcg@10")
    map_at_10: Unit | None = Field(None, alias="map@10")
    """Absent from ``/1`` reports (None there); required in ``/2`` (checked by EvalReport)."""
    citation_hit_rate: Unit | None
    insufficient_evidence_accuracy: Unit | None
    latency_ms_p50: Millis
    latency_ms_p95: Millis
    cost_per_query_usd: str | None
    estimated_cost_queries: int | None = Field(None, ge=0)
    """Queries whose tokens and cost rest on estimated token counts (no provider reported them: a
    replay fixture's characters / 4): ``cost_per_query_usd`` is then (partly) an estimate. None: not
    recorded (an older runner)."""
    queries: int = Field(ge=0)
    refused_found: int | None = Field(None, ge=0)
    """Answerable queries answered "insufficient evidence" (by the evidence floor or the model)
    although a gold passage was in the context; None: not recorded (an older runner)."""

    @field_validator("cost_per_query_usd")
    @classmethod
    def _cost(cls, value: str | None) -> str | None:
        return _usd(value)

    def get(self, name: str) -> Any:
        """Value by its JSON name (``"ndcg@10"``)."""
        data = self.model_dump(by_alias=True)
        if name not in data:
            raise KeyError(f"unknown metric {name!r}")
        return data[name]


class QueryResult(_Frozen):
    id: NonEmpty
    pack: NonEmpty
    question: NonEmpty
    gold: tuple[NonEmpty, ...]
    expect_insufficient: bool
    ranked: tuple[NonEmpty, ...] = Field(max_length=TOP_K)
    exact: tuple[NonEmpty, ...] | None = Field(None, max_length=TOP_K)
    """The anchors of ``ranked`` that came as exact reference hits; None: not recorded (an older runner)."""
    cited: tuple[NonEmpty, ...]
    answered_insufficient: bool
    latency_ms: Millis
    cost_usd: str | None
    tokens: int | None = Field(None, ge=0)
    """Model tokens (input + output) the answer billed; 0 for an extractive answer; None: not
    recorded (an older runner)."""
    tokens_estimated: bool | None = None
    """Some of those token counts were estimated, not reported by a provider (a replay fixture's
    characters / 4): ``tokens`` and ``cost_usd`` are then estimates. None: not recorded."""
    answer_method: Literal["model", "extractive", "none"] | None = None
    """How the answer was made: by the model, extractively (no model, or its call failed: see
    ``answer_error``), or ``none`` (decided before any call); None: not recorded (an older runner)."""
    answer_error: NonEmpty | None = None
    """The error type of a failed model call (``ReplayMiss``, ``ProviderTimeout``, ...)."""
    refused_found: bool | None = None
    """Answered "insufficient evidence" with a gold passage in the context; None: not recorded."""
    control_latency_ms: Millis | None = None
    """In-run control: the engine's fulltext leg alone on the same question, same run (the gate
    compares latency only as a ratio to it); None: not recorded (an older runner)."""
    names_reference: bool | None = None
    """The question names a rule, article or other reference a pack resolves (its exact-reference keys)."""
    split: Literal["train", "dev", "test"] | None = None
    """The question's committed split (``evals.splits``); None: not recorded (an older runner)."""
    answer: str | None = None
    """The answer's text as the user reads it; None: not recorded (an older runner)."""
    fact: tuple[NonEmpty, ...] | None = None
    """What the answer must state (any one of these phrases), for questions that name one."""
    fact_stated: bool | None = None
    """The answer (not a refusal) holds one of ``fact`` (case and spacing folded)."""
    recall_at_1: Unit | None = Field(alias="recall@1")
    recall_at_5: Unit | None = Field(alias="recall@5")
    recall_at_10: Unit | None = Field(alias="recall@10")
    mrr_at_10: Unit | None = Field(alias="mrr@10")
    ndcg_at_10: Unit | None = Field(alias="ndcg@10")
    map_at_10: Unit | None = Field(None, alias="map@10")
    citation_hit: Unit | None
    insufficient_correct: Unit

    @field_validator("cost_usd")
    @classmethod
    def _cost(cls, value: str | None) -> str | None:
        return _usd(value)

    @model_validator(mode="after")
    def _retrieval_metrics_need_gold(self) -> QueryResult:
        # A query expected to be unanswerable has no gold chunks, so ranking metrics are
        # undefined for it; a number there means the runner scored it against nothing.
        if self.expect_insufficient:
            filled = [k for k in RANKING_NAMES if self.value(k) is not None]
            if filled:
                raise ValueError(f"query {self.id!r} expects insufficient evidence; {filled} must be null")
        return self

    def value(self, name: str) -> float | None:
        """A per-query value by aggregate metric name or per-query JSON key."""
        key = QUERY_FIELD.get(name, name)
        if key not in _PER_QUERY_ATTR:
            raise KeyError(f"unknown per-query metric {name!r}")
        result: float | None = getattr(self, _PER_QUERY_ATTR[key])
        return result


_PER_QUERY_ATTR: dict[str, str] = {
    (info.alias or name): name
    for name, info in QueryResult.model_fields.items()
    if (info.alias or name) in QUERY_FIELD.values()
}


class SystemMetrics(_Frozen):
    """One system's ranking metrics on one pack: means over its answerable queries."""

    recall_at_1: Unit | None = Field(alias="recall@1")
    recall_at_5: Unit | None = Field(alias="recall@5")
    recall_at_10: Unit | None = Field(alias="recall@10")
    mrr_at_10: Unit | None = Field(alias="mrr@10")
    ndcg_at_10: Unit | None = Field(alias="ndcg@10")
    map_at_10: Unit | None = Field(alias="map@10")
    queries: int = Field(ge=0)
    """Answerable (scored) queries of the pack."""

    def get(self, name: str) -> float | None:
        data = self.model_dump(by_alias=True)
        if name not in data:
            raise KeyError(f"unknown system metric {name!r}")
        result: float | None = data[name]
        return result


class PackSystems(_Frozen):
    """Every system on one pack's golden questions, over the same active chunks."""

    engine: SystemMetrics
    bm25: SystemMetrics
    fulltext: SystemMetrics
    dense: SystemMetrics
    engine_no_graph: SystemMetrics | None = None
    engine_no_rerank: SystemMetrics | None = None
    engine_no_sentences: SystemMetrics | None = None
    rrf: SystemMetrics | None = None
    """Plain RRF of the fulltext and dense legs (no exact references, boosts, graph or rerank)."""
    bm25_stemmed: SystemMetrics | None = None
    """BM25 as ``bm25`` with Snowball English stems (PyStemmer)."""

    def system(self, name: str) -> SystemMetrics:
        if name not in SYSTEMS:
            raise KeyError(f"unknown system {name!r}; known: {list(SYSTEMS)}")
        metrics: SystemMetrics = getattr(self, name)
        return metrics

    def variant(self, name: str) -> SystemMetrics | None:
        if name not in VARIANTS:
            raise KeyError(f"unknown variant {name!r}; known: {list(VARIANTS)}")
        metrics: SystemMetrics | None = getattr(self, name)
        return metrics


class BaselineRankings(_Frozen):
    """One query's top 10 anchors from each baseline system (the engine's is the query's ``ranked``)."""

    bm25: tuple[NonEmpty, ...] = Field(max_length=TOP_K)
    fulltext: tuple[NonEmpty, ...] = Field(max_length=TOP_K)
    dense: tuple[NonEmpty, ...] = Field(max_length=TOP_K)


class RetrievalRun(_Frozen):
    """How the engine retrieved in this run: the effective per-leg fusion weights (config, or an
    ablation's --legs/--weights) and the engine's k (None: the configured final_k)."""

    weights: dict[NonEmpty, Annotated[float, Field(ge=0, allow_inf_nan=False)]]
    k: int | None = Field(None, ge=1)


class EvalReport(_Frozen):
    schema_id: Literal["rag-eval-report/1", "rag-eval-report/2"] = Field(SCHEMA, alias="schema")
    created_at: datetime
    run_id: NonEmpty | None = None
    """The run the eval's model calls (usage ledger) and queries (audit trail, actor ``eval``) carry;
    None: not recorded (an older runner)."""
    config_hash: NonEmpty
    golden: GoldenRef
    generation: GenerationInfo
    """What answered: the model, or provider ``none`` / model ``extractive``."""
    embedder: EmbedderInfo
    reindex: ReindexInfo | None
    configured_generation: GenerationInfo | None = None
    """The default generation model the config named when the eval ran (answering or not)."""
    metrics: ReportMetrics
    queries: tuple[QueryResult, ...]
    retrieval: RetrievalRun | None = None
    systems: dict[NonEmpty, PackSystems] | None = None
    """pack -> system -> ranking metrics (``/2`` only)."""
    rankings: dict[NonEmpty, BaselineRankings] | None = None
    """query id -> the baselines' top 10 anchors (``/2`` only)."""
    splits: dict[NonEmpty, dict[str, Any]] | None = None
    """``<pack>@<split>`` -> {systems: system -> ranking metrics, answers: rank 1, fact stated,
    found-but-refused and out-of-scope-answered rates} (``evals.answer_metrics``); the test split
    is the result, train and dev are development figures."""

    @model_validator(mode="after")
    def _consistent(self) -> EvalReport:
        ids = [q.id for q in self.queries]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"duplicate query ids: {dupes[:10]}")
        if self.metrics.queries != len(self.queries):
            raise ValueError(
                f"metrics.queries is {self.metrics.queries} but the report holds {len(self.queries)} queries"
            )
        v2_only = {"retrieval": self.retrieval, "systems": self.systems, "rankings": self.rankings}
        if self.schema_id == SCHEMA_V1:
            present = [k for k, v in v2_only.items() if v is not None]
            if present:
                raise ValueError(f"{present} belong to {SCHEMA!r}, not {SCHEMA_V1!r}")
            return self
        missing = [k for k, v in v2_only.items() if v is None]
        if "map_at_10" not in self.metrics.model_fields_set:
            missing.append("metrics.map@10")
        missing += [f"queries.{i}.map@10" for i, q in enumerate(self.queries) if "map_at_10" not in q.model_fields_set]
        if missing:
            raise ValueError(f"{SCHEMA!r} requires {missing[:10]}")
        assert self.systems is not None and self.rankings is not None  # both in `missing` when None
        packs = {q.pack for q in self.queries}
        if set(self.systems) != packs:
            raise ValueError(f"systems covers packs {sorted(self.systems)} but the queries are from {sorted(packs)}")
        for pack, table in self.systems.items():
            answerable = sum(1 for q in self.queries if q.pack == pack and not q.expect_insufficient)
            wrong = [s for s in SYSTEMS if table.system(s).queries != answerable]
            if wrong:
                raise ValueError(f"systems.{pack}: {wrong} count other than the pack's {answerable} answerable queries")
        unknown = sorted(set(self.rankings) - set(ids))
        if unknown:
            raise ValueError(f"rankings for unknown query ids: {unknown[:10]}")
        return self

    def by_id(self) -> dict[str, QueryResult]:
        return {q.id: q for q in self.queries}

    def to_json(self) -> dict[str, Any]:
        """The JSON document with the documented key names."""
        return self.model_dump(mode="json", by_alias=True)


# ---------------------------------------------------------------------------------------
# Files


def _format(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = "unknown key (not allowed here)" if err["type"] == "extra_forbidden" else err["msg"]
        lines.append(f"{where}: {msg}")
    return "\n  ".join(lines)


def parse_report(data: Any, *, source: str = "<data>") -> EvalReport:
    """Validate an already-decoded report; EvalInputError names the source and every bad field."""
    if not isinstance(data, dict):
        raise EvalInputError(f"{source}: an eval report must be a JSON object, got {type(data).__name__}")
    schema = data.get("schema")
    if schema not in SCHEMAS:
        raise EvalInputError(
            f"{source}: schema is {schema!r}, expected one of {list(SCHEMAS)} (not an eval "
            "report, or one written by an incompatible runner)"
        )
    try:
        return EvalReport.model_validate(data)
    except ValidationError as exc:
        raise EvalInputError(f"{source}: invalid eval report:\n  {_format(exc)}") from None


def load_report(path: str | Path) -> EvalReport:
    """Read and validate a report file. Raises EvalInputError (missing, not JSON, wrong schema)."""
    path = Path(path)
    if not path.is_file():
        raise EvalInputError(f"eval report not found: {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise EvalInputError(f"{path}: eval report is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise EvalInputError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    return parse_report(data, source=str(path))


def dump_report(report: EvalReport, path: str | Path) -> Path:
    """Write a report deterministically (stable key order, trailing newline); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def report_sha256(path: str | Path) -> str:
    """sha256 of the report file's bytes: what an acceptance binds to (not a re-serialisation)."""
    path = Path(path)
    if not path.is_file():
        raise EvalInputError(f"eval report not found: {path}")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def golden_sha256(paths: Sequence[str | Path]) -> str:
    """sha256 over the golden files' bytes in the given order (the report's ``golden.hash``)."""
    digest = hashlib.sha256()
    for p in paths:
        p = Path(p)
        if not p.is_file():
            raise EvalInputError(f"golden file not found: {p}")
        digest.update(p.read_bytes())
    return digest.hexdigest()
