"""WAL mode for the engine's SQLite files (the usage ledger and audit trail, the embedding cache).

Converting a file to WAL needs its write lock, and SQLite answers "database is locked" at once,
without waiting its busy timeout, while another connection holds the file's reserved lock (a
writer that opened the new file a moment earlier): several processes opening one new file
together meet exactly that. Once the file is in WAL mode the pragma is a no-op that takes no
lock. So the conversion is retried, backing off, for as long as the busy timeout.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any


def to_wal(cursor: Any, timeout_s: float) -> None:
    """Run ``PRAGMA journal_mode = WAL`` on ``cursor`` (a DB-API cursor or connection of
    ``sqlite3``), retrying "database is locked" for up to ``timeout_s``; any other error, or a
    lock that outlasts it, is raised."""
    deadline = time.monotonic() + timeout_s
    delay = 0.002
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def configure(cursor: Any, busy_timeout_ms: int) -> None:
    """The settings of every connection to an engine SQLite file (not in memory): the busy timeout
    first, so switching to WAL waits for other writers instead of failing, then WAL and
    ``synchronous = NORMAL`` (safe in WAL mode: a power cut may lose the last commits, never the file)."""
    cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    to_wal(cursor, busy_timeout_ms / 1000)
    cursor.execute("PRAGMA synchronous = NORMAL")
