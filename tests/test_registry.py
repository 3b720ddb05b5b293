"""Provider registry startup rejections, each typed; credentials checked by name only."""

import logging

import pytest

from rag_engine.errors import (
    DisabledActiveEmbedder,
    LocalProviderWithoutEndpoint,
    MissingCredential,
    MissingDefaultGenerationModel,
    ModelRoleMismatch,
    UnknownProviderReference,
)
from rag_engine.providers.registry import ProviderRegistry
from tests.conftest import SENTINEL


def _with(cfg, **changes):
    return cfg.model_copy(update=changes)


def _provider(cfg, name, **changes):
    providers = tuple(p.model_copy(update=changes) if p.name == name else p for p in cfg.providers)
    return _with(cfg, providers=providers)


def test_shipped_config_passes(base_config):
    reg = ProviderRegistry(base_config, env={})
    assert reg.generation.name == "demo-chat"
    # the default embedder is e5 on the local server; its identity carries the query/passage scheme
    assert reg.embedding.identity == "local_embed/multilingual-e5-small-q4:384;input_type=query|passage"
    fallback = _with(
        base_config, defaults=base_config.defaults.model_copy(update={"embedding_model": "hash-embed-384"})
    )
    assert ProviderRegistry(fallback, env={}).embedding.identity == "local_hash/feature-hash-v1:384"


def test_disabled_active_embedder(base_config):
    with pytest.raises(DisabledActiveEmbedder, match="e5-small"):
        ProviderRegistry(_provider(base_config, "local_embed", enabled=False), env={})


def test_missing_default_generation_model(base_config):
    cfg = _with(base_config, defaults=base_config.defaults.model_copy(update={"generation_model": "nope"}))
    with pytest.raises(MissingDefaultGenerationModel, match="'nope'"):
        ProviderRegistry(cfg, env={})


def test_local_provider_without_endpoint(base_config):
    with pytest.raises(LocalProviderWithoutEndpoint, match="local_llm"):
        ProviderRegistry(_provider(base_config, "local_llm", endpoint=None), env={})


def test_unknown_provider_reference(base_config):
    models = tuple(
        m.model_copy(update={"provider": "ghost"}) if m.name == "local-chat" else m for m in base_config.models
    )
    with pytest.raises(UnknownProviderReference, match="ghost"):
        ProviderRegistry(_with(base_config, models=models), env={})


def test_role_mismatch(base_config):
    cfg = _with(base_config, defaults=base_config.defaults.model_copy(update={"embedding_model": "demo-chat"}))
    with pytest.raises(ModelRoleMismatch):
        ProviderRegistry(cfg, env={})


def test_credential_checked_by_name_and_value_never_surfaces(base_config, caplog):
    caplog.set_level(logging.DEBUG)
    cfg = _provider(base_config, "openai", enabled=True)
    with pytest.raises(MissingCredential) as exc:
        ProviderRegistry(cfg, env={})
    assert "OPENAI_API_KEY" in str(exc.value)
    reg = ProviderRegistry(cfg, env={"OPENAI_API_KEY": SENTINEL})
    status = reg.credential_status()
    assert status["openai"] == "OPENAI_API_KEY: present"
    assert SENTINEL not in repr(status) and SENTINEL not in caplog.text
