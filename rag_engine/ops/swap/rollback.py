"""How to undo the swap: the current config's hash, the file it came from, and the edit or git
command that restores it.

Kept apart because it is about the current config, not the candidate: it reads the config file and
asks git whether that file is committed unchanged, and changes nothing.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from rag_engine.config import config_hash, load_config
from rag_engine.errors import RagError
from rag_engine.ops.swap.report import Rollback


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def plan_rollback(engine: Any, role: str, config_path: Path | None, changes: list[str], mode: str) -> Rollback:
    h = config_hash(engine.cfg)
    root = Path(engine.root)
    rel = None
    matches = False
    if config_path is not None and config_path.is_file():
        try:
            rel = str(config_path.resolve().relative_to(root.resolve()))
        except ValueError:
            rel = str(config_path)
        try:
            matches = config_hash(load_config(config_path)) == h
        except RagError:
            matches = False
    notes = []
    undo = "; ".join(c.split(": ", 1)[0] + ": " + c.split(": ", 1)[1].split(" -> ")[0] for c in changes if " -> " in c)
    command = None
    if rel and matches:
        head = _git(root, "rev-parse", "--short=12", "HEAD")
        tracked = _git(root, "ls-files", "--error-unmatch", rel) is not None
        clean = _git(root, "diff", "--quiet", "HEAD", "--", rel) is not None  # exit 0: unchanged
        if head and tracked and clean:
            command = f"git checkout {head} -- {rel}"
        elif head and tracked:
            notes.append(
                f"{rel} has uncommitted edits: copy it aside before applying the candidate (cp {rel} {rel}.rollback)"
            )
        restore = (
            f"in {rel} set back {undo}"
            if mode == "candidate_model" and undo
            else f"keep {rel} as it is (config hash {h}) and point RAG_CONFIG / --config at it again"
        )
    else:
        restore = (
            f"set back {undo} in the engine's config"
            if undo
            else "the running engine's config is not a file on disk; keep it by its hash"
        )
        if rel:
            notes.append(f"the engine's config (hash {h}) differs from {rel}: rollback means that config, not the file")
    if role == "embedding":
        notes.append(
            "`rag reindex --keep-old` keeps the current vector index, so switching back "
            "re-embeds only the chunks activated since"
        )
    return Rollback(config_hash=h, config_file=rel, restore=restore, command=command, notes=tuple(notes))
