"""Provider registry: a typed view over the config, validated once at startup.

Rejections are typed so a deploy fails with a reason a machine can act on. Credentials are
checked by environment variable *name* (present or not); the value is never read here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from rag_engine.config import Capability, EngineConfig, ModelConfig, ProviderConfig
from rag_engine.errors import (
    CapabilityNotSupported,
    DisabledActiveEmbedder,
    LocalProviderWithoutEndpoint,
    MissingCredential,
    MissingDefaultGenerationModel,
    ModelRoleMismatch,
    RegistryError,
    UnknownProviderReference,
)

QUERY_PURPOSE = "query"
"""The purpose of question embeddings; every other embedding purpose embeds passages."""
LIVE_ROWS_PURPOSE = "live_rows"
"""Live SQL rows embedded while a question waits: passages (the index side of an asymmetric
embedder), on the question's deadline."""
QUESTION_TIME_PURPOSES = frozenset({QUERY_PURPOSE, LIVE_ROWS_PURPOSE})
"""Embedding purposes a question waits for: they get the question's deadline, not indexing's."""


def credential_present(env: Mapping[str, str], name: str) -> bool:
    """The one definition of "a credential is present": the variable is set to something other
    than blanks. An empty ``OPENAI_API_KEY=`` is absent everywhere (startup check, swap dry run,
    the client), never present to one and missing to another. Reads the value only to test it."""
    return bool((env.get(name) or "").strip())


def resolve_endpoint(provider: ProviderConfig, env: Mapping[str, str]) -> str | None:
    """The provider's endpoint: the value of ``endpoint_env`` when that variable is set, else
    the configured ``endpoint``."""
    if provider.endpoint_env and env.get(provider.endpoint_env):
        return env[provider.endpoint_env]
    return provider.endpoint


@dataclass(frozen=True)
class ModelSpec:
    """One model as the rest of the engine sees it: model config joined with its provider."""

    model: ModelConfig
    provider: ProviderConfig

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def identity(self) -> str:
        """What makes outputs comparable: provider name, served model, dimension and, for an
        asymmetric embedder, the mode scheme (``;input_type=query|passage``): vectors made under
        another scheme live in another space."""
        dim = f":{self.model.dimension}" if self.model.dimension else ""
        modes = self.model.input_modes
        scheme = f";{modes.field}={modes.query}|{modes.index}" if modes is not None else ""
        return f"{self.provider.name}/{self.model.served_model}{dim}{scheme}"

    def input_mode(self, purpose: str) -> str | None:
        """The mode an asymmetric embedder is sent for a call: the query side for purpose "query",
        the index side for anything else; None for a symmetric model."""
        modes = self.model.input_modes
        if modes is None:
            return None
        return modes.query if purpose == QUERY_PURPOSE else modes.index

    def supports(self, capability: Capability) -> bool:
        return capability in self.model.capabilities

    def require(self, *capabilities: Capability) -> None:
        """Fail at the boundary, before any network call, if a capability is missing."""
        missing = [c for c in capabilities if c not in self.model.capabilities]
        if missing:
            raise CapabilityNotSupported(
                f"model {self.model.name!r} ({self.provider.name}) lacks capability {missing}; "
                f"it declares {list(self.model.capabilities)}"
            )


class ProviderRegistry:
    def __init__(self, cfg: EngineConfig, env: Mapping[str, str] | None = None):
        self._cfg = cfg
        self._env = os.environ if env is None else env
        self._validate()

    # -- validation ------------------------------------------------------------------
    def _validate(self) -> None:
        cfg = self._cfg
        for m in cfg.models:
            if cfg.provider(m.provider) is None:
                raise UnknownProviderReference(
                    f"model {m.name!r} references unknown provider {m.provider!r}; "
                    f"configured: {[p.name for p in cfg.providers]}"
                )
        for p in cfg.providers:
            if p.kind in ("openai_compatible", "llama_cpp") and not p.hosted and not resolve_endpoint(p, self._env):
                where = f" (and {p.endpoint_env} is not set)" if p.endpoint_env else ""
                raise LocalProviderWithoutEndpoint(f"local provider {p.name!r} ({p.kind}) has no endpoint{where}")
            if p.kind == "replay" and not p.cassette:
                raise RegistryError(f"replay provider {p.name!r} has no cassette path")
        gen = cfg.model(cfg.defaults.generation_model)
        if gen is None:
            raise MissingDefaultGenerationModel(
                f"defaults.generation_model {cfg.defaults.generation_model!r} is not a configured model"
            )
        if gen.role != "generation":
            raise ModelRoleMismatch(f"defaults.generation_model {gen.name!r} has role {gen.role!r}")
        if not self._provider_of(gen).enabled:
            raise RegistryError(f"default generation model {gen.name!r} uses disabled provider {gen.provider!r}")
        emb = cfg.model(cfg.defaults.embedding_model)
        if emb is None:
            raise RegistryError(f"defaults.embedding_model {cfg.defaults.embedding_model!r} is not a configured model")
        if emb.role != "embedding":
            raise ModelRoleMismatch(f"defaults.embedding_model {emb.name!r} has role {emb.role!r}")
        if not self._provider_of(emb).enabled:
            raise DisabledActiveEmbedder(f"active embedder {emb.name!r} belongs to disabled provider {emb.provider!r}")
        if cfg.defaults.extraction_model is not None:
            ext = cfg.model(cfg.defaults.extraction_model)
            if ext is None or ext.role != "generation":
                raise ModelRoleMismatch(
                    f"defaults.extraction_model {cfg.defaults.extraction_model!r} is not a generation model"
                )
            if not self._provider_of(ext).enabled:
                raise RegistryError(f"extraction model {ext.name!r} uses disabled provider {ext.provider!r}")
        for p in cfg.providers:
            if p.enabled and p.credential_env and not credential_present(self._env, p.credential_env):
                raise MissingCredential(
                    f"provider {p.name!r} is enabled but environment variable {p.credential_env} is not set"
                )

    def _provider_of(self, model: ModelConfig) -> ProviderConfig:
        """The model's provider; every model's reference is checked by ``_validate``."""
        provider = self._cfg.provider(model.provider)
        if provider is None:
            raise UnknownProviderReference(f"model {model.name!r} references unknown provider {model.provider!r}")
        return provider

    # -- lookups ---------------------------------------------------------------------
    @property
    def config(self) -> EngineConfig:
        return self._cfg

    def spec(self, model_name: str) -> ModelSpec:
        model = self._cfg.model(model_name)
        if model is None:
            raise RegistryError(f"unknown model {model_name!r}")
        return ModelSpec(model=model, provider=self._provider_of(model))

    @property
    def generation(self) -> ModelSpec:
        return self.spec(self._cfg.defaults.generation_model)

    @property
    def embedding(self) -> ModelSpec:
        return self.spec(self._cfg.defaults.embedding_model)

    @property
    def extraction(self) -> ModelSpec:
        return self.spec(self._cfg.defaults.extraction_model or self._cfg.defaults.generation_model)

    def credential_status(self) -> dict[str, str]:
        """Per provider: 'present', 'missing' or 'not needed'. Reports names, never values."""
        out = {}
        for p in self._cfg.providers:
            if not p.credential_env:
                out[p.name] = "not needed"
            else:
                present = credential_present(self._env, p.credential_env)
                out[p.name] = f"{p.credential_env}: {'present' if present else 'missing'}"
        return out
