"""llama.cpp's own HTTP server (``llama-server``), spoken natively: provider kind ``llama_cpp``.

Two endpoints, as the server's README documents them (tools/server/README.md of llama.cpp):

``POST /completion`` (generation: query variants, the chat-prompt rerank)
    request  ``{"prompt": str, "n_predict": int, "temperature": 0, "cache_prompt": true,
               "t_max_predict_ms": int, "json_schema": {...}?}``
    response ``{"content": str, "model": str, "tokens_evaluated": int, "tokens_predicted": int,
               "stop_type": "eos"|"limit"|"word", "truncated": bool, "timings": {...}}``

``POST /rerank`` (alias of ``/reranking``; the Jina/Cohere shape other rerank servers use too)
    request  ``{"model": str, "query": str, "documents": [str, ...], "top_n": int}``
    response ``{"model": str, "object": "list", "usage": {"prompt_tokens": int, "total_tokens": int},
               "results": [{"index": int, "relevance_score": float}, ...]}``

Every request is capped: ``n_predict`` is always sent (the caller's ``max_tokens``, else
``budgets.max_output_tokens``-sized ``DEFAULT_N_PREDICT``; a server left to its default of -1
generates until its context is full), and each has a timeout (the caller's, else the provider's
``timeout_s``), mirrored to the server as ``t_max_predict_ms`` so it stops generating too. The
messages of a chat call are sent as one prompt, their contents in order (``/completion`` applies
no chat template). HTTP is httpx (already the openai SDK's transport); failures map onto the
engine's typed provider errors, one attempt per call (a question's budget leaves no room for retries).
"""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
from pydantic import BaseModel

from rag_engine.errors import (
    CapabilityNotSupported,
    ConfigError,
    ProviderError,
    ProviderResponseInvalid,
    ProviderTimeout,
)
from rag_engine.providers.registry import ModelSpec
from rag_engine.providers.results import Completion, Embeddings, Scores, TokenUsage

DEFAULT_N_PREDICT = 512
"""Output cap of a /completion call whose caller named none."""


def render_prompt(messages: list[dict[str, Any]]) -> str:
    """The messages' contents in order, one block each: ``/completion`` takes a prompt, not turns."""
    parts = []
    for m in messages:
        content = m.get("content", "")
        parts.append(content if isinstance(content, str) else json.dumps(content, default=str))
    return "\n\n".join(parts) + "\n"


class LlamaCppBackend:
    """One model on a llama.cpp server: ``/completion`` and ``/rerank``; no embeddings here (the
    engine's embedder speaks the OpenAI-style ``/v1/embeddings``)."""

    def __init__(self, spec: ModelSpec, *, base_url: str | None, transport: httpx.BaseTransport | None = None):
        if not base_url:
            raise ConfigError(f"provider {spec.provider.name!r} (llama_cpp) has no endpoint")
        # the server's own routes sit at its root; an endpoint configured with the OpenAI /v1 suffix works too
        root = base_url.rstrip("/")
        self._root = root[: -len("/v1")] if root.endswith("/v1") else root
        self._spec = spec
        self._http = httpx.Client(timeout=spec.provider.timeout_s, transport=transport)

    def __repr__(self) -> str:
        return f"LlamaCppBackend({self._spec.identity})"

    @property
    def name(self) -> str:
        return self._spec.provider.name

    def _post(self, path: str, body: dict[str, Any], timeout_s: float | None) -> dict[str, Any]:
        timeout = timeout_s if timeout_s is not None else self._spec.provider.timeout_s
        try:
            response = self._http.post(f"{self._root}{path}", json=body, timeout=timeout)
        except httpx.TimeoutException:
            raise ProviderTimeout(f"provider {self.name!r} did not answer {path} within {timeout:g}s") from None
        except httpx.HTTPError as exc:
            raise ProviderError(f"provider {self.name!r}: {path}: {type(exc).__name__}") from None
        if response.status_code >= 400:
            raise ProviderError(f"provider {self.name!r} answered HTTP {response.status_code} on {path}")
        try:
            data = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ProviderResponseInvalid(
                f"provider {self.name!r} answered {path} with a body that is not JSON"
            ) from None
        if not isinstance(data, dict):
            raise ProviderResponseInvalid(f"provider {self.name!r} answered {path} with a {type(data).__name__}")
        return data

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        schema: type[BaseModel] | None,
        structured: bool,
        max_tokens: int | None,
        timeout_s: float | None = None,
    ) -> Completion:
        n_predict = max_tokens if max_tokens is not None else DEFAULT_N_PREDICT
        timeout = timeout_s if timeout_s is not None else self._spec.provider.timeout_s
        body: dict[str, Any] = {
            "prompt": render_prompt(messages),
            "n_predict": n_predict,
            "temperature": 0,
            "cache_prompt": True,
            "t_max_predict_ms": max(1, math.floor(timeout * 1000)),
        }
        if schema is not None and structured:
            body["json_schema"] = schema.model_json_schema()
        data = self._post("/completion", body, timeout_s)
        content = data.get("content")
        if not isinstance(content, str):
            raise ProviderResponseInvalid(f"provider {self.name!r}: /completion answer has no content")
        raw_timings = data.get("timings")
        timings: dict[str, Any] = raw_timings if isinstance(raw_timings, dict) else {}
        evaluated = data.get("tokens_evaluated", timings.get("prompt_n"))
        predicted = data.get("tokens_predicted", timings.get("predicted_n"))
        counted = isinstance(evaluated, int) and isinstance(predicted, int)
        return Completion(
            text=content,
            reported_model=data.get("model") if isinstance(data.get("model"), str) else None,
            usage=TokenUsage(
                input_tokens=evaluated if isinstance(evaluated, int) else 0,
                output_tokens=predicted if isinstance(predicted, int) else 0,
                reported=counted,
            ),
            provider=self.name,
        )

    def rerank(self, query: str, documents: list[str], *, timeout_s: float | None = None) -> Scores:
        body = {
            "model": self._spec.model.served_model,
            "query": query,
            "documents": documents,
            "top_n": len(documents),
        }
        data = self._post("/rerank", body, timeout_s)
        results = data.get("results")
        if not isinstance(results, list):
            raise ProviderResponseInvalid(f"provider {self.name!r}: /rerank answer has no results list")
        scores: list[float | None] = [None] * len(documents)
        for r in results:
            index, score = (r.get("index"), r.get("relevance_score")) if isinstance(r, dict) else (None, None)
            if not isinstance(index, int) or not 0 <= index < len(documents) or scores[index] is not None:
                raise ProviderResponseInvalid(f"provider {self.name!r}: /rerank result index {index!r} is not valid")
            if not isinstance(score, (int, float)) or isinstance(score, bool) or not math.isfinite(score):
                raise ProviderResponseInvalid(
                    f"provider {self.name!r}: /rerank score of document {index} is not a number"
                )
            scores[index] = float(score)
        if any(s is None for s in scores):
            raise ProviderResponseInvalid(
                f"provider {self.name!r}: /rerank scored {len(results)} of {len(documents)} documents"
            )
        raw_usage = data.get("usage")
        usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
        prompt_tokens = usage.get("prompt_tokens")
        return Scores(
            scores=[float(s) for s in scores if s is not None],
            reported_model=data.get("model") if isinstance(data.get("model"), str) else None,
            usage=TokenUsage(
                input_tokens=prompt_tokens if isinstance(prompt_tokens, int) else 0,
                reported=isinstance(prompt_tokens, int),
            ),
            provider=self.name,
        )

    def embed(self, texts: list[str], *, input_mode: str | None = None) -> Embeddings:
        raise CapabilityNotSupported(
            f"provider {self.name!r} (llama_cpp) serves /completion and /rerank, not embeddings"
        )
