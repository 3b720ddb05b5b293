"""Per-partition JSON artifacts passed between pipeline steps.

Steps exchange plain, inspectable JSON files keyed by (pack, partition, step) rather than
pickles, so a failed document can be looked at by a person and any step can be re-run alone.
Writes are atomic (temp file + rename) so a crash never leaves half a file behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


class ArtifactStore:
    def __init__(self, base: Path):
        self.base = base

    def path(self, pack: str, partition: str, step: str) -> Path:
        return self.base / pack / partition / f"{step}.json"

    def write(self, pack: str, partition: str, step: str, payload: Any) -> Path:
        target = self.path(pack, partition, step)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{step}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, ensure_ascii=False)
        os.replace(tmp, target)
        return target

    def read(self, pack: str, partition: str, step: str) -> Any:
        target = self.path(pack, partition, step)
        if not target.is_file():
            raise FileNotFoundError(f"no {step} artifact for {pack}/{partition}: materialize {step} first")
        return json.loads(target.read_text(encoding="utf-8"))

    def exists(self, pack: str, partition: str, step: str) -> bool:
        return self.path(pack, partition, step).is_file()
