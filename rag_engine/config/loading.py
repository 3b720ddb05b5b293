"""Loading ``config/engine.yaml`` with the file and line of every problem, and the config's
secret-free dump and hashes."""

from __future__ import annotations

import hashlib
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from rag_engine import yaml_safe
from rag_engine.config.engine import EngineConfig
from rag_engine.errors import ConfigError, UnknownRoleCollection


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """Walk the composed YAML tree along a pydantic error location to find the source line."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((kv for kv in node.value if kv[0].value == part), None)
            if match is None:
                return line
            key_node, node = match
            line = key_node.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _format_errors(path: Path, node: yaml.Node | None, exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        dotted = ".".join(str(p) for p in loc) or "(top level)"
        line = _line_of(node, loc)
        where = f"{path}:{line}" if line else str(path)
        msg = "unknown key (not allowed here)" if err["type"] == "extra_forbidden" else err["msg"]
        lines.append(f"{where}: {dotted}: {msg}")
    return "invalid config:\n  " + "\n  ".join(lines)


def load_config(path: str | Path) -> EngineConfig:
    """Load and validate engine.yaml; raise ConfigError with file:line for every problem."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    text = path.read_text(encoding="utf-8")
    try:
        node = yaml.compose(text)
        data = yaml_safe.load(text, source=path, allow_aliases=True)  # the operator's own file: anchors are fine
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    try:
        return EngineConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(path, node, exc)) from None
    except UnknownRoleCollection as exc:
        line = _line_of(node, ("roles", exc.role))
        raise UnknownRoleCollection(f"{path}:{line}: {exc}" if line else f"{path}: {exc}", role=exc.role) from None


_USERINFO = re.compile(r"(?<=://)[^/@\s]*@")
_PASSWORD = re.compile(r"(?<=://)([^/@:\s]*):[^/\s]*@")  # up to the last '@': a password may hold one
_QUERY_VALUE = re.compile(r"([?&][^=&#\s]+)=[^&#\s]*")


def redact_url(url: str) -> str:
    """A URL as it may be printed, logged or put into an error: a password in its userinfo and every
    query value become ``***`` (``bolt://neo4j:***@db:7687``); the user name and host stay."""
    return _QUERY_VALUE.sub(r"\1=***", _PASSWORD.sub(r"\1:***@", url))


def _redact(value: Any) -> Any:
    """Strip anything that could carry a secret from values that are hashed or reported.

    The config holds env var names only, but an endpoint URL may embed user:password@ or a
    ?key= query; those are removed so the hash never depends on a secret.
    """
    if isinstance(value, dict):
        return {k: _redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact(v) for v in value]
    if isinstance(value, str) and "://" in value:
        return _USERINFO.sub("", value).split("?", 1)[0]
    if isinstance(value, Decimal):
        return str(value)
    return value


def redacted_dump(cfg: EngineConfig) -> dict[str, Any]:
    dumped: dict[str, Any] = _redact(cfg.model_dump(mode="json"))  # a dict in, a dict out
    return dumped


def config_hash(cfg: EngineConfig) -> str:
    """Stable hash of the secret-redacted config (never of environment values)."""
    canonical = json.dumps(redacted_dump(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def slice_hash(*parts: Any) -> str:
    """Hash of a config slice; the basis of asset code versions."""
    canonical = json.dumps(_redact(list(parts)), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]
