"""One typed error tree, so callers (CLI, Dagster, tests) can tell failures apart without parsing text."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rag_engine.usage import UsageRecord


class RagError(Exception):
    """Root of every error the engine raises on purpose."""


class ConfigError(RagError):
    """The configuration file is missing, malformed or inconsistent."""


class RegistryError(ConfigError):
    """The provider registry rejected the configuration at startup."""


class DisabledActiveEmbedder(RegistryError):
    """The default embedding model belongs to a disabled provider."""


class MissingDefaultGenerationModel(RegistryError):
    """defaults.generation_model names no configured model."""


class LocalProviderWithoutEndpoint(RegistryError):
    """A local (not hosted) OpenAI-compatible provider has no endpoint."""


class UnknownProviderReference(RegistryError):
    """A model names a provider that is not configured."""


class ModelRoleMismatch(RegistryError):
    """A default points at a model whose role does not fit (e.g. generation model as embedder)."""


class MissingCredential(RegistryError):
    """An enabled provider's credential environment variable is not set (the name is reported, never a value)."""


class UnknownRoleCollection(ConfigError):
    """A role names a collection no enabled pack declares (a typo or a stale role): refused at startup."""

    def __init__(self, message: str, role: str = ""):
        super().__init__(message)
        self.role = role


class PackError(RagError):
    """A domain pack could not be loaded or violated its contract."""


class PackShadowed(PackError):
    """An installed distribution publishes a pack of the same name (entry point group
    ``rag_engine.packs``) with another target than the configured ``module:factory``: refused,
    never silently chosen."""


class DocumentError(RagError):
    """One source document is unusable (empty, not UTF-8, binary, too large)."""


class BadPartitionKey(DocumentError):
    """A partition key that is not ``<doc id>--<12 hex>`` (it could name a path outside the artifacts)."""


class KeyConflict(DocumentError):
    """A document answers to a reference key another document of its pack owns (that document's id,
    ``DomainPack.owned_keys``): the later claimant is rejected, the owner keeps the key."""

    def __init__(self, message: str, conflicts: dict[str, str] | None = None):
        super().__init__(message)
        self.conflicts = dict(conflicts or {})
        """key -> the document that owns it."""


class StoreError(RagError):
    """The graph store failed or was asked something it cannot answer."""


class StoreUnavailable(StoreError):
    """Neo4j cannot be reached (stopped, wrong URI, refused credentials) within the connect timeout."""

    def __init__(self, message: str, uri: str = "", partition: str = ""):
        super().__init__(message)
        self.uri = uri
        self.partition = partition
        """The partition a run was at when the store stopped answering (empty: before any)."""


class NotIngested(StoreError):
    """The store holds nothing to answer from yet (no current chunks, no vector index): ingest first."""


class EmbedderMismatch(StoreError):
    """The index was built with another embedder: a full re-index is required."""


class PolicyError(RagError):
    """A role is unknown or asks for collections it may not read."""


class ProviderError(RagError):
    """A model provider call failed after retries."""

    usage: UsageRecord | None = None
    """The call's usage record (set by ModelClient): a failed call may have been billed, e.g. an
    answer that does not match the schema; budgets charge its tokens."""


class CapabilityNotSupported(ProviderError):
    """The model lacks a capability the request needs; raised before any network call."""


class ReplayMiss(ProviderError):
    """A replay provider has no recorded answer for this request."""


class ProviderTimeout(ProviderError):
    """The provider did not answer within the configured timeout."""


class ContextLimitExceeded(ProviderError):
    """A request would not fit the model's declared ``context_limit`` (prompt plus output cap):
    refused at the provider boundary, before any I/O."""


class ProviderRateLimited(ProviderError):
    """The provider kept answering 429 after the allowed retries."""


class ProviderResponseInvalid(ProviderError):
    """The provider answered with something that is not a valid response."""


class EmbeddingInvalid(ProviderResponseInvalid):
    """The embedder answered with a vector that cannot be indexed or compared: not finite (NaN,
    infinity), all zeros (a cosine index leaves it out) or of another dimension than configured.
    Raised before the vector is cached, written or searched with."""


class FeedbackError(RagError):
    """A path feedback request is invalid (unknown verdict, empty path, nodes the graph does not hold)."""


class EvalInputError(RagError):
    """An eval input (report, golden file, acceptance) is missing, not valid JSON/YAML or of the wrong schema."""


class IncomparableReports(RagError):
    """Two eval reports cannot be compared (other golden set, other query ids, too few paired queries)."""


class QueryInputError(RagError):
    """A question or query option is unusable (k out of range, too long, not valid text)."""


class ApprovalError(RagError):
    """A mutating operator action was refused for want of a valid approval; nothing was changed.

    ``inputs_hash``: the sha256 an approval of the action as it stands must bind, so a caller can
    show it beside the refusal (the Dagster run's failure metadata) without parsing the message."""

    def __init__(self, message: str, *, inputs_hash: str | None = None):
        super().__init__(message)
        self.inputs_hash = inputs_hash

    def __reduce__(self) -> tuple[object, ...]:  # pickled across processes with its hash
        return (_approval_error, (type(self), str(self), self.inputs_hash))


def _approval_error(cls: type[ApprovalError], message: str, inputs_hash: str | None) -> ApprovalError:
    return cls(message, inputs_hash=inputs_hash)


class ApprovalRequired(ApprovalError):
    """The action changes state and no approval was given."""


class ApprovalMismatch(ApprovalError):
    """The approval names another action, or binds other inputs than the ones the action would act on."""


class AuditError(RagError):
    """The audit trail could not be written or read."""


class LedgerUnavailable(RagError):
    """The ledger database (usage ledger and audit trail: ``storage.ledger``) cannot be reached:
    the server is stopped, the URL is wrong, the credentials are refused or the SQLite file cannot
    be opened."""


class Unauthenticated(RagError):
    """A service request without a valid key: refused before anything else runs."""


class Forbidden(PolicyError):
    """An authenticated caller asked for a role its principal does not hold."""


class ServiceLimit(RagError):
    """The query service refused or cut a request to stay up (``serving.limits``)."""


class RateLimited(ServiceLimit):
    """A principal is over its request rate or its concurrency cap: retry after ``retry_after`` s."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class RequestTimeout(ServiceLimit):
    """A request did not finish within the service's per-request timeout."""


class RequestTooLarge(ServiceLimit):
    """A request body over the service's size limit."""
