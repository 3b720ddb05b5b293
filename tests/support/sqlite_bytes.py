"""The bytes of SQLite files that live connections of this process may hold open.

A test must not ``read_bytes()`` such a file itself: POSIX record locks belong to the process, so
closing any descriptor of the file drops the locks SQLite's own connections hold on it, and
another connection can then take the database for unused and delete its WAL index underneath
them: every later read in this process says "database disk image is malformed". A child process
reads them instead.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

_READ = "import sys\nfor p in sys.argv[1:]:\n    with open(p, 'rb') as f:\n        sys.stdout.buffer.write(f.read())\n"


def read_apart(paths: Iterable[Path]) -> bytes:
    """The files' bytes, concatenated, read by a child process."""
    names = [str(p) for p in paths]
    if not names:
        return b""
    done = subprocess.run([sys.executable, "-c", _READ, *names], capture_output=True, check=True, timeout=60)
    return done.stdout
