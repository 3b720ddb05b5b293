"""Extraction cache keyed by (chunk content hash, prompt hash, model identity).

A graph rebuild, a traversal-policy change or a re-run of an unchanged document never calls
the LLM again: the raw model answer is reused and re-validated under the current rules. The
entry remembers which run and model produced it, so provenance stays truthful.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def cache_key(content_hash: str, prompt_hash: str, model_identity: str) -> str:
    return hashlib.sha256(f"{content_hash}|{prompt_hash}|{model_identity}".encode()).hexdigest()


class ExtractionCache:
    def __init__(self, base: Path):
        self.base = base

    def _path(self, key: str) -> Path:
        return self.base / key[:2] / f"{key}.json"

    def has(self, key: str) -> bool:
        """Whether an answer is stored under ``key``, without reading it."""
        return self._path(key).is_file()

    def get(self, key: str) -> dict[str, Any] | None:
        path = self._path(key)
        if not path.is_file():
            return None
        entry: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return entry

    def put(self, key: str, entry: dict[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(entry, fh)
        os.replace(tmp, path)
