"""Per-partition JSON artifacts passed between pipeline steps.

Steps exchange plain, inspectable JSON files keyed by (pack, partition, step) rather than
pickles, so a failed document can be looked at by a person and any step can be re-run alone.
Writes are atomic (temp file + rename) so a crash never leaves half a file behind.

Within one run where the next step is in the same process (``ingest_pack``), ``remembering()``
keeps every payload written or read in memory: later steps get it without re-reading and
re-parsing the file. The files are still written, for Dagster's steps that run in other processes
and for people. Payloads handed out from memory are shared: callers treat them as read-only.

Every path is a plain name under the root: the partition must be a well-formed document-version
key (``partition_keys.check``), the pack and step plain names, and the resolved path must lie under
the root, so no key can read or write a file outside it.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rag_engine.errors import BadPartitionKey
from rag_engine.store.partition_keys import check as check_partition_key

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


class ArtifactStore:
    def __init__(self, base: Path):
        self.base = base
        self._memory: dict[tuple[str, str, str], Any] | None = None

    @contextmanager
    def remembering(self) -> Iterator[None]:
        """Serve reads from memory for artifacts written or read inside the block (nested: the outer one wins)."""
        if self._memory is not None:
            yield
            return
        self._memory = {}
        try:
            yield
        finally:
            self._memory = None

    def path(self, pack: str, partition: str, step: str) -> Path:
        check_partition_key(partition)
        for what, name in (("pack", pack), ("step", step)):
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise BadPartitionKey(f"artifact {what} {name!r} is not a plain name")
        target = self.base / pack / partition / f"{step}.json"
        root = self.base.resolve()
        if not target.resolve().is_relative_to(root):  # a linked folder under the root pointing out
            raise BadPartitionKey(f"artifact path for {pack}/{partition}/{step} resolves outside {self.base}")
        return target

    def write(self, pack: str, partition: str, step: str, payload: Any) -> Path:
        target = self.path(pack, partition, step)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{step}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, ensure_ascii=False)
        os.replace(tmp, target)
        if self._memory is not None:
            self._memory[(pack, partition, step)] = payload
        return target

    def read(self, pack: str, partition: str, step: str) -> Any:
        if self._memory is not None and (pack, partition, step) in self._memory:
            return self._memory[(pack, partition, step)]
        target = self.path(pack, partition, step)
        if not target.is_file():
            raise FileNotFoundError(f"no {step} artifact for {pack}/{partition}: materialize {step} first")
        payload = json.loads(target.read_text(encoding="utf-8"))
        if self._memory is not None:
            self._memory[(pack, partition, step)] = payload
        return payload

    def exists(self, pack: str, partition: str, step: str) -> bool:
        if self._memory is not None and (pack, partition, step) in self._memory:
            return True
        return self.path(pack, partition, step).is_file()
