"""The query service: principals, limits, and the operator role."""

from __future__ import annotations

from pydantic import Field, model_validator

from rag_engine.config.base import Frozen
from rag_engine.usage import EVAL_ACTOR


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
    accept_incoming: bool = True
    """Continue a caller's trace: an HTTP request's W3C ``traceparent`` (and ``tracestate``) makes
    the query's spans children of the caller's span, in the caller's trace (whose id the audit
    record then carries), and the caller's sampled flag decides. False: every query starts a
    trace of its own, whatever the request says."""
    headers_env: str | None = Field(None, pattern=r"^[A-Z_][A-Z0-9_]*$")
    """The NAME of an environment variable holding the exporter's headers (``key=value,...``, e.g.
    a collector's API key): never the value in this file."""
    timeout_seconds: float = Field(5.0, gt=0)
