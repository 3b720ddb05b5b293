"""Progress of a run's embedding across its partitions: chunks done of total, rate, ETA.

Embedding is most of a first ingest (on 2 cores, minutes), and a Dagster run of many partitions
printed nothing while it ran. ``EmbedTracker`` takes each partition's ``EmbedProgress`` (after
every batch), sums them over the run, and reports a line when the run's embedding starts, at
most every ``every_s`` seconds while batches come in, at least every ``every_s`` seconds while one
is in flight (a ticker thread), and when it ends. Lines go to the ``rag_engine.progress`` logger
and to ``emit`` (a Dagster step's ``context.log.info``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

log = logging.getLogger("rag_engine.progress")


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m {seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class EmbedTracker:
    def __init__(
        self,
        label: str,
        total: int,
        *,
        emit: Callable[[str], None] | None = None,
        every_s: float = 10.0,
    ):
        self.label, self.total, self.emit, self.every_s = label, total, emit, every_s
        self._done: dict[str, int] = {}
        self._cached: dict[str, int] = {}
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._last = 0.0
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    # -- figures -----------------------------------------------------------------------------
    def line(self) -> str:
        with self._lock:
            done, cached = sum(self._done.values()), sum(self._cached.values())
        elapsed = time.monotonic() - self._started
        embedded = done - cached  # what the model had to do: the rate and ETA are about that
        rate = embedded / elapsed if elapsed > 0 else 0.0
        left = max(0, self.total - done)
        eta = f", ETA {_duration(left / rate)}" if rate > 0 and left else ""
        return (
            f"{self.label}: {done}/{self.total} chunks embedded ({cached} from cache), "
            f"{rate:.1f} chunks/s, {_duration(elapsed)} elapsed{eta}"
        )

    def _say(self) -> None:
        text = self.line()
        self._last = time.monotonic()
        log.info(text)
        if self.emit is not None:
            self.emit(text)

    # -- hooks -------------------------------------------------------------------------------
    def callback(self, key: str) -> Callable[[Any], None]:
        """The ``EmbedProgress`` callback for one partition's embedding."""

        def on_batch(p: Any) -> None:
            with self._lock:
                self._done[key], self._cached[key] = p.done, p.cache_hits
            if time.monotonic() - self._last >= self.every_s:
                self._say()

        return on_batch

    def _tick(self) -> None:
        while not self._stop.wait(self.every_s / 2):
            if time.monotonic() - self._last >= self.every_s:
                self._say()

    def __enter__(self) -> EmbedTracker:
        self._say()
        self._ticker = threading.Thread(target=self._tick, name="embed-progress", daemon=True)
        self._ticker.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        self._say()
