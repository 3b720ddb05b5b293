"""Calls to OpenAI and OpenAI-compatible servers (llama.cpp, Ollama, vLLM): chat completions
through the official SDK, embeddings over plain HTTP.

Schema-constrained requests are sent in the form the provider's server accepts
(``structured_request``): the servers differ on the wire although all speak "the OpenAI API".

Embeddings are one POST of a JSON body to ``<endpoint>/embeddings`` and one JSON answer, sent
with httpx (the SDK's own transport) as the SDK would send them: no SDK there, so a process that
only embeds (a one-off ``rag query`` embedding its question) never imports it (about 0.6 s); the
SDK is imported at the first chat completion. The HTTP failures map onto the same typed errors
as the SDK's exceptions.

The SDK does the HTTP and the wire types of chat completions; this module owns everything that
must not depend on the SDK version: retries and their timing (see ``retry``), the client-side rate limit, mapping
failures onto our typed errors, and keeping the API key out of every message. Exceptions are
raised ``from None`` so SDK exceptions (whose request objects carry the Authorization header)
never ride along in ``__cause__``/``__context__``.
"""

from __future__ import annotations

import json
import logging
import re
import ssl
import sys
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from rag_engine.config import StructuredOutputForm
from rag_engine.errors import (
    ConfigError,
    ProviderError,
    ProviderRateLimited,
    ProviderResponseInvalid,
    ProviderTimeout,
)
from rag_engine.providers.pricing import local_compute
from rag_engine.providers.ratelimit import RateLimiter, estimate_tokens
from rag_engine.providers.registry import ModelSpec
from rag_engine.providers.results import Completion, Embeddings, TokenUsage
from rag_engine.providers.retry import RETRYABLE_STATUS, RetryPolicy, parse_retry_after
from rag_engine.providers.vectors import check_vectors

if TYPE_CHECKING:
    import openai

log = logging.getLogger(__name__)

OPENAI_BASE_URL = "https://api.openai.com/v1"
# Sent to local servers that need no key, so the SDK never falls back to OPENAI_API_KEY from the
# environment and hands a hosted key to a local endpoint.
NO_KEY = "no-key-configured"
_KEYLIKE = re.compile(r"(?i)\b(bearer\s+\S+|sk-[A-Za-z0-9_*.\-]{4,})")
_SDK_PREFIX = re.compile(r"^Error code: \d+ - ")
_USERINFO = re.compile(r"(?<=://)[^/@\s]*@")
_T = TypeVar("_T")


class _Redactor:
    """Removes the key (and anything key-shaped) from text; its repr never shows the key."""

    def __init__(self, secret: str | None):
        self._secret = secret

    def __repr__(self) -> str:
        return "_Redactor(***)"

    def __call__(self, text: str) -> str:
        if self._secret:
            text = text.replace(self._secret, "***")
        return _KEYLIKE.sub("***", text)


_NO_CA = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
"""The TLS context of a plain-HTTP endpoint's client (a local server): it trusts no certificate
authority, so a redirect to https fails verification instead of trusting anything; httpx's default
loads the CA bundle, 30-60 ms that every process embedding over loopback would pay for nothing."""


class _HttpStatus(Exception):
    """An error status from the embeddings endpoint: what the SDK raises as ``APIStatusError``."""

    def __init__(self, status_code: int, headers: httpx.Headers, message: str):
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code
        self.headers = headers
        self.message = message


def _error_message(response: httpx.Response) -> str:
    """The ``error.message`` of an error body (or its top-level ``message``), as the SDK reads it."""
    try:
        body = json.loads(response.content)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return ""
    error = body.get("error", body) if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) else ""


def _sdk_error(exc: BaseException, name: str) -> bool:
    """Whether ``exc`` is the SDK's exception ``name`` (only a call through the SDK raises one,
    and only once it is imported)."""
    sdk = sys.modules.get("openai")
    return sdk is not None and isinstance(exc, getattr(sdk, name))


class _Failure:
    def __init__(self, error: ProviderError, *, retryable: bool, retry_after: float | None = None, label: str = ""):
        self.error = error
        self.retryable = retryable
        self.retry_after = retry_after
        self.label = label


def _schema_of(schema: type[BaseModel]) -> tuple[dict[str, Any], bool]:
    """The JSON schema sent for a pydantic model, and whether it is strict (the SDK's own converter,
    used by ``.parse()``, when it can make one; pydantic's plain schema otherwise)."""
    try:
        from openai.lib._pydantic import to_strict_json_schema

        return to_strict_json_schema(schema), True
    except Exception:  # noqa: BLE001 - private SDK helper: any failure falls back to pydantic's plain schema
        return schema.model_json_schema(), False


def response_format_for(schema: type[BaseModel]) -> dict[str, Any]:
    """OpenAI structured-output format for a pydantic model (strict schema when the SDK can make one)."""
    json_schema, strict = _schema_of(schema)
    name = re.sub(r"[^A-Za-z0-9_-]", "_", schema.__name__)[:64]
    return {"type": "json_schema", "json_schema": {"name": name, "schema": json_schema, "strict": strict}}


def structured_request(schema: type[BaseModel], form: StructuredOutputForm) -> dict[str, Any]:
    """The request fields (keyword arguments of ``chat.completions.create``) that constrain the
    answer to ``schema``, in the form the provider's server accepts (``ProviderConfig.structured_output_form``).

    Whatever the form, the answer is still validated against the schema by the caller: a server
    that ignores the constraint, or an answer cut at max_tokens, fails like any bad output."""
    if form == "json_schema":
        return {"response_format": response_format_for(schema)}
    if form == "json_object_schema":
        return {"response_format": {"type": "json_object", "schema": _schema_of(schema)[0]}}
    if form == "json_object":
        return {"response_format": {"type": "json_object"}}
    if form == "structured_outputs":
        return {"extra_body": {"structured_outputs": {"json": _schema_of(schema)[0]}}}
    raise ConfigError(f"unknown structured output form {form!r}")  # pragma: no cover - config validation forbids it


class OpenAIBackend:
    """One provider/model over the OpenAI HTTP API; the key is read once, at construction."""

    def __init__(
        self,
        spec: ModelSpec,
        *,
        api_key: str | None,
        limiter: RateLimiter,
        sleep: Callable[[float], None] = time.sleep,
        base_url: str | None = None,
    ):
        """``base_url`` overrides the configured endpoint (``resolve_endpoint``: endpoint_env)."""
        provider = spec.provider
        base_url = base_url or provider.endpoint or (OPENAI_BASE_URL if provider.kind == "openai" else None)
        if not base_url:
            raise ConfigError(f"provider {provider.name!r} ({provider.kind}) has no endpoint")
        self._spec = spec
        self._where = "" if provider.hosted else f" at {_USERINFO.sub('', base_url).split('?', 1)[0]}"
        self._redact = _Redactor(api_key)
        self._limiter = limiter
        self._sleep = sleep
        self._policy = RetryPolicy(max_retries=provider.max_retries, backoff_base_s=provider.backoff_base_s)
        self._base_url = base_url
        self._api_key = api_key or NO_KEY
        self._sdk_client: openai.OpenAI | None = None
        self._sdk_lock = threading.Lock()
        self._http = httpx.Client(
            timeout=provider.timeout_s,
            follow_redirects=True,  # as the SDK's client
            headers={"Authorization": f"Bearer {self._api_key}"},
            verify=_NO_CA if base_url.lower().startswith("http://") else True,
        )

    def _load_sdk(self) -> openai.OpenAI:
        """The SDK client, built (and the SDK imported) at the first chat completion or ``preload``."""
        with self._sdk_lock:
            if self._sdk_client is None:
                import openai

                self._sdk_client = openai.OpenAI(
                    api_key=self._api_key,
                    base_url=self._base_url,
                    timeout=self._spec.provider.timeout_s,
                    max_retries=0,  # retries are ours: see retry.py
                )
            return self._sdk_client

    def __repr__(self) -> str:
        return f"OpenAIBackend({self._spec.identity})"

    def preload(self) -> None:
        """The SDK imported and its client built now (``ModelClient.preload``), not at the first
        chat completion."""
        self._load_sdk()

    @property
    def name(self) -> str:
        return self._spec.provider.name

    # -- operations -----------------------------------------------------------------
    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        schema: type[BaseModel] | None,
        structured: bool,
        max_tokens: int | None,
        timeout_s: float | None = None,
    ) -> Completion:
        kwargs: dict[str, Any] = {"model": self._spec.model.served_model, "messages": messages}
        deadline = None
        if timeout_s is not None:  # a capped call: each attempt and all of them together end by then
            kwargs["timeout"] = timeout_s
            deadline = time.monotonic() + timeout_s
        if max_tokens is not None:
            # Hosted OpenAI deprecated max_tokens; local servers mostly only know max_tokens.
            kwargs["max_completion_tokens" if self._spec.provider.kind == "openai" else "max_tokens"] = max_tokens
        if schema is not None and structured:
            kwargs.update(structured_request(schema, self._spec.provider.structured_output_form or "json_schema"))
        estimate = estimate_tokens([json.dumps(m.get("content", ""), default=str) for m in messages], max_tokens)
        response = self._call(lambda: self._load_sdk().chat.completions.create(**kwargs), estimate, deadline)
        return self._completion(response)

    def embed(self, texts: list[str], *, input_mode: str | None = None) -> Embeddings:
        served = self._spec.model.served_model
        estimate = estimate_tokens(list(texts))
        body: dict[str, Any] = {"model": served, "input": list(texts), "encoding_format": "float"}
        modes = self._spec.model.input_modes
        if input_mode is not None and modes is not None:
            # not an OpenAI parameter: servers of asymmetric embedders read it from the body
            body[modes.field] = input_mode
        response = self._call(lambda: self._post("/embeddings", body), estimate)
        return self._embeddings(response, len(texts))

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        """POST ``body`` as JSON to ``<endpoint><path>``; the answer's JSON objects as attribute
        objects (the shape the SDK's response types have for ``_embeddings``). Raises httpx's
        errors, ``_HttpStatus`` for an error status, a JSON or Unicode error for a broken body."""
        response = self._http.post(f"{self._base_url.rstrip('/')}{path}", json=body)
        if response.status_code >= 400:
            raise _HttpStatus(response.status_code, response.headers, _error_message(response))
        return json.loads(response.content, object_hook=lambda obj: SimpleNamespace(**obj))

    # -- the retry loop -------------------------------------------------------------
    def _call(self, send: Callable[[], _T], estimate: int, deadline: float | None = None) -> _T:
        retry = 0
        while True:
            self._limiter.acquire(estimate)
            failure: _Failure | None = None
            try:
                response = send()
            except Exception as exc:
                failure = self._failure(exc, retry)
                if failure is None:  # not a provider failure: a bug, never retried or renamed
                    raise
            if failure is None:
                self._limiter.settle(estimate, _reported_total(response, estimate))
                return response
            # Raised outside the except blocks: no SDK exception in __context__.
            if not failure.retryable or not self._policy.may_retry(retry, failure.retry_after):
                raise failure.error from None
            delay = self._policy.delay(retry, failure.retry_after)
            if deadline is not None and time.monotonic() + delay >= deadline:
                raise failure.error from None  # no time left for another attempt
            log.info(
                "provider %s: %s, retry %d/%d in %.2fs",
                self.name,
                failure.label,
                retry + 1,
                self._policy.max_retries,
                delay,
            )
            self._sleep(delay)
            retry += 1

    def _failure(self, exc: Exception, retry: int) -> _Failure | None:
        """What a failed attempt means: the SDK's exceptions (chat completions) and httpx's
        (embeddings) alike; None for anything else."""
        if isinstance(exc, httpx.TimeoutException) or _sdk_error(exc, "APITimeoutError"):
            return _Failure(
                ProviderTimeout(
                    f"provider {self.name!r} did not answer within {self._spec.provider.timeout_s}s "
                    f"(after {retry + 1} attempt(s))"
                ),
                retryable=True,
                label="timeout",
            )
        if isinstance(exc, httpx.HTTPError) or _sdk_error(exc, "APIConnectionError"):
            return _Failure(
                ProviderError(f"provider {self.name!r}: connection failed{self._where} (after {retry + 1} attempt(s))"),
                retryable=True,
                label="connection error",
            )
        if isinstance(exc, _HttpStatus) or _sdk_error(exc, "APIStatusError"):
            status: Any = exc  # both carry status_code and message; the SDK's headers are on its response
            headers = status.headers if isinstance(exc, _HttpStatus) else status.response.headers
            return self._status_failure(status.status_code, headers, str(status.message or ""), retry + 1)
        if isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)) or _sdk_error(exc, "APIResponseValidationError"):
            return _Failure(
                ProviderResponseInvalid(f"provider {self.name!r} answered with a body that is not valid JSON"),
                retryable=False,
            )
        if _sdk_error(exc, "OpenAIError"):
            return _Failure(
                ProviderError(f"provider {self.name!r}: {type(exc).__name__}: {self._redact(str(exc))[:300]}"),
                retryable=False,
            )
        return None

    def _status_failure(self, status: int, headers: Any, message: str, attempts: int) -> _Failure:
        retry_after = parse_retry_after(dict(headers)) if status in (429, 503) else None
        where = f"provider {self.name!r} answered HTTP {status}"
        if status in (401, 403):
            # Auth error bodies often echo (part of) the key: never pass them on.
            env = self._spec.provider.credential_env
            hint = f"; check the key in environment variable {env}" if env else ""
            return _Failure(ProviderError(f"{where}: authentication failed{hint}"), retryable=False)
        detail = _SDK_PREFIX.sub("", self._redact(message))[:200]
        if status == 429:
            wait = f"; asked to wait {retry_after:.1f}s" if retry_after is not None else ""
            err: ProviderError = ProviderRateLimited(f"{where} (rate limited) after {attempts} attempt(s){wait}")
        else:
            err = ProviderError(f"{where} after {attempts} attempt(s): {detail}")
        return _Failure(err, retryable=status in RETRYABLE_STATUS, retry_after=retry_after, label=f"HTTP {status}")

    # -- response parsing -----------------------------------------------------------
    def _invalid(self, what: str) -> ProviderResponseInvalid:
        return ProviderResponseInvalid(f"provider {self.name!r}: {what}")

    def _completion(self, response: Any) -> Completion:
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise self._invalid("response has no choices") from None
        message = getattr(choices[0], "message", None)
        content = getattr(message, "content", None)
        if not isinstance(content, str):
            refusal = getattr(message, "refusal", None)
            raise self._invalid("model refused to answer" if refusal else "response has no text content") from None
        try:
            return Completion(
                text=content,
                reported_model=getattr(response, "model", None) or None,
                usage=_usage(getattr(response, "usage", None)),
                provider=self.name,
            )
        except ValidationError:
            raise self._invalid("response usage is malformed") from None

    def _embeddings(self, response: Any, expected: int) -> Embeddings:
        data = getattr(response, "data", None)
        if not isinstance(data, list) or len(data) != expected:
            raise self._invalid(f"expected {expected} embeddings, got {len(data) if isinstance(data, list) else 0}")
        ordered = sorted(data, key=lambda d: getattr(d, "index", 0) or 0)
        raw_vectors = [getattr(d, "embedding", None) for d in ordered]
        vectors = [v for v in raw_vectors if isinstance(v, list) and v]
        if len(vectors) != len(raw_vectors):
            raise self._invalid("embedding vectors are missing") from None
        dim = self._spec.model.dimension
        if dim is not None and any(len(v) != dim for v in vectors):
            raise self._invalid(f"embedding dimension is not the configured {dim}") from None
        try:
            floats = [[float(x) for x in v] for v in vectors]
        except (TypeError, ValueError):
            raise self._invalid("embedding response is malformed") from None
        # checked here too, not only in ModelClient: a replay provider in record mode writes this
        # answer to its cassette before the client sees it
        check_vectors(floats, dim, who=f"provider {self.name!r}")
        try:
            return Embeddings(
                vectors=floats,
                reported_model=getattr(response, "model", None) or None,
                usage=_usage(getattr(response, "usage", None)),
                provider=self.name,
                priced=not local_compute(self._spec.provider, self._spec.model),
            )
        except (ValidationError, TypeError, ValueError):
            raise self._invalid("embedding response is malformed") from None


def _usage(usage: Any) -> TokenUsage:
    """Provider usage -> TokenUsage; absent details stay None (not reported), never 0."""
    if usage is None:
        return TokenUsage()  # no usage block: neither reported nor estimated, the cost is unknown
    prompt_details = getattr(usage, "prompt_tokens_details", None)
    completion_details = getattr(usage, "completion_tokens_details", None)
    return TokenUsage(
        input_tokens=getattr(usage, "prompt_tokens", None) or 0,
        cached_input_tokens=getattr(prompt_details, "cached_tokens", None) if prompt_details is not None else None,
        output_tokens=getattr(usage, "completion_tokens", None) or 0,
        reasoning_tokens=(
            getattr(completion_details, "reasoning_tokens", None) if completion_details is not None else None
        ),
        reported=True,
    )


def _reported_total(response: Any, default: int) -> int:
    usage = getattr(response, "usage", None)
    total = getattr(usage, "total_tokens", None)
    return total if isinstance(total, int) else default
