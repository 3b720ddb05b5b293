"""Neo4j connection settings from config: the URI and credentials come from env var NAMES.

The URI is only ever shown redacted (``Neo4jTarget.shown_uri``: a password in it becomes ``***``),
in reprs, errors and config check output alike; the driver's own error for a URI it refuses quotes
the URI, so it is translated here into a ConfigError that does not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

import neo4j

from rag_engine.config import EngineConfig, redact_url
from rag_engine.errors import ConfigError, StoreError, StoreUnavailable


@dataclass(frozen=True)
class Neo4jTarget:
    uri: str
    database: str
    user_env: str
    password_env: str
    connect_timeout_s: float = 5.0
    uri_env: str = "NEO4J_URI"

    @property
    def shown_uri(self) -> str:
        """The URI as it may be printed: a password in it (``bolt://user:pw@host``) is redacted."""
        return redact_url(self.uri)

    def __repr__(self) -> str:  # never show credentials, only where they come from
        return (
            f"Neo4jTarget(uri={self.shown_uri!r}, database={self.database!r}, "
            f"auth from ${self.user_env}/${self.password_env})"
        )


def neo4j_target(cfg: EngineConfig, env: Mapping[str, str] | None = None) -> Neo4jTarget:
    env = os.environ if env is None else env
    n = cfg.storage.neo4j
    return Neo4jTarget(
        uri=env.get(n.uri_env) or n.default_uri,
        database=n.database,
        user_env=n.user_env,
        password_env=n.password_env,
        connect_timeout_s=n.connect_timeout_s,
        uri_env=n.uri_env,
    )


def open_driver(
    target: Neo4jTarget, env: Mapping[str, str] | None = None, acquisition_timeout_s: float | None = None
) -> neo4j.Driver:
    """A driver for ``target``; ``acquisition_timeout_s`` bounds a server that accepts and never
    answers (default: twice the connect timeout, at least 10 s)."""
    env = os.environ if env is None else env
    user, password = env.get(target.user_env), env.get(target.password_env)
    auth = (user, password) if user and password else None
    # the connect timeout bounds the TCP connect only; a server that accepts and never answers the
    # handshake is bounded by the acquisition timeout (the driver's default is 60 s)
    try:
        return neo4j.GraphDatabase.driver(
            target.uri,
            auth=auth,
            connection_timeout=target.connect_timeout_s,
            connection_acquisition_timeout=(
                max(2 * target.connect_timeout_s, 10.0) if acquisition_timeout_s is None else acquisition_timeout_s
            ),
            max_connection_lifetime=3600,
            # the server's notifications (an unknown label or property on a fresh store, a
            # deprecation) are not errors; the driver logged each as a ~600-character WARNING
            notifications_min_severity="OFF",
        )
    except (neo4j.exceptions.ConfigurationError, ValueError) as exc:  # its message quotes the whole URI
        hint = (
            f"; credentials go in ${target.user_env}/${target.password_env}, not in the URI"
            if "@" in target.uri.partition("://")[2].partition("/")[0]
            else ""
        )
        raise ConfigError(
            f"${target.uri_env} is not a usable Neo4j URI ({target.shown_uri}): "
            f"{redact_url(str(exc).replace(target.uri, target.shown_uri))}{hint}"
        ) from None


def check_reachable(driver: neo4j.Driver, target: Neo4jTarget) -> None:
    """Fail fast with one typed error when the store cannot be reached (bounded by the connect
    timeout), instead of a command retrying its first transaction for half a minute."""
    try:
        driver.verify_connectivity()
    except neo4j.exceptions.AuthError as exc:
        raise StoreUnavailable(
            f"Neo4j at {target.shown_uri} refused the credentials from ${target.user_env}/"
            f"${target.password_env}: {exc.message}",
            uri=target.shown_uri,
        ) from None
    except (neo4j.exceptions.ServiceUnavailable, neo4j.exceptions.SessionExpired, OSError) as exc:
        raise StoreUnavailable(
            f"Neo4j is not reachable at {target.shown_uri} ({type(exc).__name__}); start the "
            f"local one with `make neo4j-start`, or point ${target.uri_env} at yours",
            uri=target.shown_uri,
        ) from None


PROBE_TIMEOUT_S = 2.0
"""How long a probe waits for the store (``probe_store``): a sensor tick or a status line, not a
command's first transaction, so far less than the connect timeout a command waits."""


def probe_store(target: Neo4jTarget, env: Mapping[str, str] | None = None, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """``check_reachable`` on a throwaway driver whose connect and handshake wait at most
    ``timeout_s`` (never longer than the configured connect timeout): a stopped store is one typed
    ``StoreUnavailable`` within that bound, where the first query of a tick would retry for half a
    minute. A URI the driver refuses is the ``ConfigError`` of ``open_driver``."""
    bound = min(timeout_s, target.connect_timeout_s)
    probe = replace(target, connect_timeout_s=bound)
    driver = open_driver(probe, env, acquisition_timeout_s=bound)
    try:
        check_reachable(driver, target)
    finally:
        driver.close()


def single_record(result: neo4j.Result, what: str) -> neo4j.Record:
    """The one record of a query that always returns exactly one row (an aggregate such as
    ``count`` or ``collect``); a clear StoreError instead of indexing None if it did not."""
    record = result.single()
    if record is None:
        raise StoreError(f"Neo4j returned no row for {what}")
    return record


UNREACHABLE = (neo4j.exceptions.ServiceUnavailable, neo4j.exceptions.SessionExpired)


def store_unreachable(exc: BaseException) -> BaseException | None:
    """The driver error that says the store stopped answering, if ``exc`` is one or was raised
    because of one (a step may wrap it), else None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, UNREACHABLE):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def not_answering(gone: BaseException) -> StoreUnavailable:
    """The typed error for ``gone``, a driver error of ``UNREACHABLE``."""
    return StoreUnavailable(f"Neo4j is not answering ({type(gone).__name__}); retry later")


def store_gone(exc: BaseException) -> StoreUnavailable | None:
    """A driver error saying the store stopped answering (or an error raised because of one) as
    ``StoreUnavailable``; None for any other error."""
    gone = store_unreachable(exc)
    return None if gone is None else not_answering(gone)
