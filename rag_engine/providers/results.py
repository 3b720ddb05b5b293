"""What a model call returns, at two levels.

Backends (OpenAI SDK, cassette, hash embedder) answer with a ``Completion`` or ``Embeddings``:
raw text or vectors plus what the provider reported. ``ModelClient`` turns those into a
``GenerationResult`` / ``EmbeddingResult`` carrying the parsed output and the ledger record,
so callers see one shape whatever answered.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from rag_engine.usage import UsageRecord


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)


class TokenUsage(_Frozen):
    """Token counts as the provider reported them; ``None`` = not reported (distinct from 0)."""

    input_tokens: int = Field(0, ge=0)
    cached_input_tokens: int | None = Field(None, ge=0)
    output_tokens: int = Field(0, ge=0)
    reasoning_tokens: int | None = Field(None, ge=0)
    reported: bool = True  # False when the response had no usage block at all: cost is unknown


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
