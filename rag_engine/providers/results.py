"""What a model call returns, at two levels.

Backends (OpenAI SDK, cassette, hash embedder) answer with a ``Completion`` or ``Embeddings``:
raw text or vectors plus what the provider reported. ``ModelClient`` turns those into a
``GenerationResult`` / ``EmbeddingResult`` carrying the parsed output and the ledger record,
so callers see one shape whatever answered.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rag_engine.text.token_count import CHARS_PER_TOKEN, ESTIMATE
from rag_engine.usage import UsageRecord


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)


CHARACTER_ESTIMATE = ESTIMATE
"""How a fixture counts tokens it never measured (``TokenUsage.from_characters``; ``text.token_count``)."""


class TokenUsage(_Frozen):
    """A call's token counts and where they come from; ``None`` = not reported (distinct from 0).

    Three cases, never confused: ``reported`` (a provider's response said so), ``estimate`` (the
    counts were computed, e.g. a fixture's characters / 4: a cost priced from them is an estimate),
    or neither (no usage at all: the cost is unknown). Nothing is "reported" unless a backend says so.
    """

    input_tokens: int = Field(0, ge=0)
    cached_input_tokens: int | None = Field(None, ge=0)
    output_tokens: int = Field(0, ge=0)
    reasoning_tokens: int | None = Field(None, ge=0)
    reported: bool = False
    """True only when the provider's response reported these counts."""
    estimate: str | None = None
    """How the counts were computed when no provider reported them (``CHARACTER_ESTIMATE``)."""

    @model_validator(mode="after")
    def _one_source(self) -> TokenUsage:
        if self.reported and self.estimate is not None:
            raise ValueError("token counts are either reported by the provider or estimated, not both")
        return self

    @property
    def known(self) -> bool:
        """Counts a cost can be priced from: reported, or estimated (the cost then is an estimate)."""
        return self.reported or self.estimate is not None

    @classmethod
    def from_characters(cls, input_chars: int, output_chars: int, cached_input_chars: int | None = None) -> TokenUsage:
        """Counts a fixture makes up at ``CHARS_PER_TOKEN`` characters a token: estimated, never reported."""
        return cls(
            input_tokens=input_chars // CHARS_PER_TOKEN,
            output_tokens=output_chars // CHARS_PER_TOKEN,
            cached_input_tokens=None if cached_input_chars is None else cached_input_chars // CHARS_PER_TOKEN,
            estimate=CHARACTER_ESTIMATE,
        )


class Completion(_Frozen):
    text: str
    reported_model: str | None = None
    usage: TokenUsage = TokenUsage()
    provider: str  # who actually answered (the live provider in record mode)


class Embeddings(_Frozen):
    vectors: list[list[float]]
    reported_model: str | None = None
    usage: TokenUsage = TokenUsage()
    provider: str
    priced: bool = True  # False for local compute that costs nothing (cost recorded as 0)


class Scores(_Frozen):
    """A rerank endpoint's answer: one relevance score per document, in the documents' order."""

    scores: list[float]
    reported_model: str | None = None
    usage: TokenUsage = TokenUsage()
    provider: str


class RerankResult(_Frozen):
    scores: list[float]
    usage: UsageRecord


class GenerationResult(_Frozen):
    text: str
    parsed: BaseModel | None = None
    usage: UsageRecord


class EmbeddingResult(_Frozen):
    vectors: list[list[float]]
    usage: UsageRecord


class Backend(Protocol):
    """What answers a call: the OpenAI SDK, a cassette, the local hash embedder."""

    @property
    def name(self) -> str: ...

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        schema: type[BaseModel] | None,
        structured: bool,
        max_tokens: int | None,
        timeout_s: float | None = None,
    ) -> Completion:
        """``timeout_s``: this call's time cap (None: the provider's ``timeout_s``)."""
        ...

    def embed(self, texts: list[str], *, input_mode: str | None = None) -> Embeddings:
        """``input_mode``: the query or index mode of an asymmetric embedder (None: symmetric)."""
        ...
