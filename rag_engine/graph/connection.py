"""Neo4j connection settings from config: the URI and credentials come from env var NAMES."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import neo4j

from rag_engine.config import EngineConfig


@dataclass(frozen=True)
class Neo4jTarget:
    uri: str
    database: str
    user_env: str
    password_env: str

    def __repr__(self) -> str:  # never show credentials, only where they come from
        return f"Neo4jTarget(uri={self.uri!r}, database={self.database!r}, auth from ${self.user_env}/${self.password_env})"


def neo4j_target(cfg: EngineConfig, env: Mapping[str, str] | None = None) -> Neo4jTarget:
    env = os.environ if env is None else env
    n = cfg.storage.neo4j
    return Neo4jTarget(
        uri=env.get(n.uri_env) or n.default_uri,
        database=n.database,
        user_env=n.user_env,
        password_env=n.password_env,
    )


def open_driver(target: Neo4jTarget, env: Mapping[str, str] | None = None) -> neo4j.Driver:
    env = os.environ if env is None else env
    user, password = env.get(target.user_env), env.get(target.password_env)
    auth = (user, password) if user and password else None
    return neo4j.GraphDatabase.driver(target.uri, auth=auth, connection_timeout=10, max_connection_lifetime=3600)
