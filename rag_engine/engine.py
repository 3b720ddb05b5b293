"""The engine's runtime context: config, registry, packs, Neo4j driver, artifacts.

Built once per process (CLI command, Dagster resource, test session). Holds no Dagster.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import neo4j

from rag_engine import DEFAULT_CONFIG, tracing
from rag_engine.config import LEGS, EngineConfig, load_config, under_root
from rag_engine.errors import ConfigError, PackError
from rag_engine.packs import DomainPack, load_packs
from rag_engine.providers.embedders import HashEmbedder
from rag_engine.providers.registry import QUESTION_TIME_PURPOSES, ModelSpec, ProviderRegistry
from rag_engine.store.artifacts import ArtifactStore
from rag_engine.store.connection import Neo4jTarget, neo4j_target, open_driver

if TYPE_CHECKING:
    from rag_engine.providers.clients import ModelClient
    from rag_engine.providers.embedding_cache import EmbeddingCache
    from rag_engine.providers.in_process import QuestionEmbedder
    from rag_engine.providers.ledger import UsageLedger
    from rag_engine.providers.pricing import PriceTable
    from rag_engine.store.live_sql import LiveSources


def project_root() -> Path:
    """RAG_ROOT if set, else the repository this package lives in."""
    return Path(os.environ.get("RAG_ROOT") or Path(__file__).resolve().parents[1])


class Engine:
    def __init__(
        self, cfg: EngineConfig, root: Path, env: Mapping[str, str] | None = None, packs: list[DomainPack] | None = None
    ):
        self.cfg = cfg
        self.root = root
        self.env = os.environ if env is None else env
        self.registry = ProviderRegistry(cfg, self.env)
        self._configure_tracing()
        if packs is not None:  # an explicit pack set (fixtures, evals) instead of the configured ones
            self.__dict__["_pack_load"] = ({p.name: p for p in packs}, {})

    @classmethod
    def from_path(
        cls, config_path: str | Path = DEFAULT_CONFIG, root: Path | None = None, env: Mapping[str, str] | None = None
    ) -> Engine:
        root = root or project_root()
        return cls(load_config(under_root(root, config_path)), root, env)

    def _configure_tracing(self) -> None:
        """The process's query-path spans per ``tracing`` (off: no exporter); the headers (a
        collector's key) come from the variable ``tracing.headers_env`` names."""
        t = self.cfg.tracing
        raw = self.env.get(t.headers_env, "") if t.headers_env else ""
        headers = dict(h.split("=", 1) for h in raw.split(",") if "=" in h)
        tracing.configure(
            enabled=t.enabled,
            endpoint=t.endpoint,
            service_name=t.service_name,
            sample_ratio=t.sample_ratio,
            accept_incoming=t.accept_incoming,
            headers={k.strip(): v.strip() for k, v in headers.items()},
            timeout_seconds=t.timeout_seconds,
        )

    # -- packs -------------------------------------------------------------------------
    @cached_property
    def _pack_load(self) -> tuple[dict[str, DomainPack], dict[str, PackError]]:
        loaded, broken = load_packs(self.cfg, self.root)
        return {p.name: p for p in loaded}, broken

    @property
    def packs(self) -> dict[str, DomainPack]:
        """The enabled packs that loaded; a broken one is left out (``broken_packs``)."""
        return self._pack_load[0]

    @property
    def broken_packs(self) -> dict[str, PackError]:
        """Enabled packs that failed to load: name -> the PackError saying why."""
        return self._pack_load[1]

    @property
    def packs_loaded(self) -> bool:
        """Whether the packs were loaded in this process (callers report broken ones only then)."""
        return "_pack_load" in self.__dict__

    def pack(self, name: str) -> DomainPack:
        if name in self.broken_packs:
            raise PackError(str(self.broken_packs[name])) from None
        try:
            return self.packs[name]
        except KeyError:
            raise PackError(f"pack {name!r} is not enabled; enabled: {sorted(self.packs)}") from None

    # -- storage -----------------------------------------------------------------------
    @cached_property
    def neo4j_target(self) -> Neo4jTarget:
        return neo4j_target(self.cfg, self.env)

    @property
    def database(self) -> str:
        return self.cfg.storage.neo4j.database

    @cached_property
    def driver(self) -> neo4j.Driver:
        return open_driver(self.neo4j_target, self.env)

    @cached_property
    def artifacts(self) -> ArtifactStore:
        return ArtifactStore(under_root(self.root, self.cfg.storage.artifacts_dir))

    # -- models ------------------------------------------------------------------------
    @cached_property
    def ledger(self) -> UsageLedger:
        """The append-only usage ledger every metered model call writes to."""
        from rag_engine.providers.ledger import UsageLedger, ledger_url

        return UsageLedger(ledger_url(self.cfg, self.env, self.root))

    @cached_property
    def pricing(self) -> PriceTable:
        from rag_engine.providers.pricing import pricing_for

        return pricing_for(self.cfg, self.root)

    def client(self, model_name: str) -> ModelClient:
        """A metered client (ledger + pricing) for a configured model, cached per process."""
        cache: dict[str, ModelClient] = self.__dict__.setdefault("_clients", {})
        if model_name not in cache:
            from rag_engine.providers.clients import build_client

            cache[model_name] = build_client(
                self.registry.spec(model_name),
                ledger=self.ledger,
                pricing=self.pricing,
                env=self.env,
                root=self.root,
                config=self.cfg,
            )
        return cache[model_name]

    def use_client(self, model_name: str, client: ModelClient) -> None:
        """Answer ``model_name``'s calls with ``client`` from now on (a cassette builder recording
        fixture answers through the engine's own query path)."""
        if client.spec.name != model_name:
            raise ConfigError(f"client for {client.spec.name!r} cannot serve model {model_name!r}")
        self.__dict__.setdefault("_clients", {})[model_name] = client
        self.__dict__.setdefault("_given_clients", set()).add(model_name)
        self.__dict__.pop("query_embedder", None)

    @cached_property
    def embedder(self) -> HashEmbedder | ModelClient:
        """The active embedder. The local hash embedder is plain computation (not metered);
        any provider-backed embedder goes through the metered client."""
        spec = self.registry.embedding
        if spec.provider.kind == "local_hash":
            return HashEmbedder(spec)
        return self.client(spec.name)

    @cached_property
    def query_embedder(self) -> HashEmbedder | ModelClient | QuestionEmbedder:
        """The active embedder for questions: the same model, identity and ledger, but with the
        question's deadline (``retrieval.query_embed_timeout_s`` per attempt,
        ``query_embed_retries``), not the provider's indexing timeout and retries; for a model
        with ``in_process``, embedded in this process once a probe matched the server."""
        emb = self.embedder
        spec = self.registry.embedding
        if isinstance(emb, HashEmbedder) or spec.name in self.__dict__.get("_given_clients", ()):
            return emb
        from rag_engine.providers.clients import build_client

        r = self.cfg.retrieval
        provider = spec.provider.model_copy(
            update={
                "timeout_s": min(spec.provider.timeout_s, r.query_embed_timeout_s),
                "max_retries": min(spec.provider.max_retries, r.query_embed_retries),
            }
        )
        server = build_client(
            ModelSpec(model=spec.model, provider=provider),
            ledger=self.ledger,
            pricing=self.pricing,
            env=self.env,
            root=self.root,
            config=self.cfg,
        )
        if spec.model.in_process is None:
            return server
        from rag_engine.providers.clients import ModelClient
        from rag_engine.providers.in_process import QuestionEmbedder

        return QuestionEmbedder(spec, server, lambda b: ModelClient(spec, b, ledger=self.ledger, pricing=self.pricing))

    def prepare_question_embedder(self) -> bool:
        """For a long-running process or an eval, at start: checks the in-process question embedder
        against one server answer now (asked with the indexing client's deadline: no user waits on
        it), so questions skip the server from the first one, and no question's embedding can miss
        its deadline on a loaded machine; whether questions are embedded in this process (False for
        a model without ``in_process``)."""
        prepare = getattr(self.query_embedder, "prepare", None)
        return bool(prepare(self.embedder)) if prepare is not None else False

    @cached_property
    def embedding_cache(self) -> EmbeddingCache | None:
        """Passage embeddings already paid for (``storage.embedding_cache``, or the file the
        ``storage.embedding_cache_env`` variable names), or None: off, or the local hash embedder,
        which computes faster than a cache lookup."""
        path = self.embedding_cache_path
        if path is None:
            return None
        from rag_engine.providers.embedding_cache import EmbeddingCache

        return EmbeddingCache(path)

    @property
    def embedding_cache_path(self) -> Path | None:
        """The embedding cache file in use (the environment's override first), or None when off."""
        storage = self.cfg.storage
        path = self.env.get(storage.embedding_cache_env) or storage.embedding_cache
        if path is None or self.registry.embedding.provider.kind == "local_hash":
            return None
        return under_root(self.root, path)

    def embed_texts(self, texts: list[str], *, purpose: str, run_id: str | None = None) -> list[list[float]]:
        """Embed through the active embedder; ``purpose`` "query" selects the query mode of an
        asymmetric embedder, any other purpose the index mode; a purpose a question waits for
        (QUESTION_TIME_PURPOSES) gets the question's deadline (``query_embedder``). Not cached
        (see ingest.steps.index_step)."""
        emb = self.query_embedder if purpose in QUESTION_TIME_PURPOSES else self.embedder
        if isinstance(emb, HashEmbedder):
            return emb.embed(texts)
        return emb.embed(texts, purpose=purpose, run_id=run_id).vectors

    @property
    def leg_weights(self) -> dict[str, float]:
        """Fusion weight per retrieval leg: configured ones, else 1.0; the dense leg's default is
        the active embedding model's ``dense_weight``."""
        dense = self.registry.embedding.model.dense_weight
        return {
            **dict.fromkeys(LEGS, 1.0),
            **({"dense": dense} if dense is not None else {}),
            **self.cfg.retrieval.weights,
        }

    @cached_property
    def live_sources(self) -> LiveSources:
        """Connections to the packs' live SQL sources (``packs[].live_sources``), opened on first use."""
        from rag_engine.store.live_sql import LiveSources

        return LiveSources(self.env)

    def sibling(self, cfg: EngineConfig) -> Engine:
        """An engine with another config over this one's store, ledger, audit trail and packs (the
        query service follows a re-index to another embedder with one); closing it is not needed
        and closes nothing of this one's."""
        other = Engine(cfg, self.root, self.env)
        for shared in ("driver", "ledger", "pricing", "_pack_load"):  # cached properties: shared, not rebuilt
            other.__dict__[shared] = getattr(self, shared)
        if "_audit_trail" in self.__dict__:
            other.__dict__["_audit_trail"] = self.__dict__["_audit_trail"]
        return other

    @property
    def embedder_identity(self) -> str:
        return self.registry.embedding.identity

    def close(self) -> None:
        if "driver" in self.__dict__:
            self.driver.close()
        if "live_sources" in self.__dict__:
            self.live_sources.dispose()
        for built in ("ledger", "_audit_trail"):  # their connections closed (SQLite: the WAL checkpointed)
            if built in self.__dict__:
                self.__dict__[built].dispose()
