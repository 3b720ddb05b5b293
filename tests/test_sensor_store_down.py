"""Sensors with Neo4j stopped (Dagster operations round two, item 5): a document sensor's tick showed
the driver's ServiceUnavailable traceback through sensors.py, ingest/steps.py and ingest/stamps.py
after 33-58 s of retries, while the approval sensor beside it skipped in one line.

Every sensor that reads the store now probes it first with a short bound and skips the tick with
the line a failed step shows (``<name>: the store is unavailable: Neo4j is not reachable at ...``).
The store is a closed loopback port (stopped) or a listener that never answers the handshake (hung).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import dagster as dg
import pytest

from rag_assets.definitions import build_definitions
from rag_engine.store.connection import PROBE_TIMEOUT_S


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never says a word (a hung server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield int(s.getsockname()[1])


def _tick(defs: dg.Definitions, name: str) -> tuple[object, float]:
    sensor = defs.resolve_sensor_def(name)
    ctx = dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral(), resources={"rag": defs.resources["rag"]})
    started = time.perf_counter()
    result = sensor(ctx)
    return result, time.perf_counter() - started


@pytest.mark.parametrize("store", ["stopped", "hung"])
def test_sensors_skip_in_one_line_within_the_probe_bound_when_the_store_is_down(
    variant, unique, monkeypatch, silent_port, store
):
    port = _closed_port() if store == "stopped" else silent_port
    monkeypatch.setenv("NEO4J_URI", f"bolt://127.0.0.1:{port}")
    defs = build_definitions(variant(f"down-{store}"))
    for name in (f"{unique}__new_document_versions", "paid_work_approval_status"):
        result, elapsed = _tick(defs, name)
        assert isinstance(result, dg.SkipReason), (name, result)
        message = result.skip_message or ""
        assert "\n" not in message, message
        prefixes = (f"{name}: the store is unavailable: ", f"{name} ({unique}): the store is unavailable: ")
        assert message.startswith(prefixes), message
        assert f"Neo4j is not reachable at bolt://127.0.0.1:{port}" in message, message
        assert "the next tick tries again" in message
        assert elapsed < PROBE_TIMEOUT_S + 3, (name, elapsed)  # the probe's bound, not the driver's retries


def test_a_bug_in_a_sensor_keeps_its_traceback(variant, unique, monkeypatch):
    """Only typed engine errors and a stopped store become a skipped tick: an unexpected error is a
    failed tick with its traceback (what a developer needs)."""
    import rag_assets.sensors as sensors

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(sensors, "withdraw_missing_documents", broken)
    defs = build_definitions(variant("bug"))
    with pytest.raises(Exception, match="a bug"):
        _tick(defs, f"{unique}__new_document_versions")


def test_the_automation_sensor_holds_paid_work_in_one_line_when_the_store_is_down(variant, unique, monkeypatch):
    """``rag_automation``'s cost condition estimates extraction from the extraction runs in Neo4j: with
    the store stopped the estimate is one warning line within the probe's bound and the paid work is
    held, not a driver traceback failing the automation tick after half a minute."""
    from rag_assets.automation import estimate_or_hold

    monkeypatch.setenv("NEO4J_URI", f"bolt://127.0.0.1:{_closed_port()}")
    defs = build_definitions(variant("down-automation"))
    engine = defs.resources["rag"].engine()

    class Log:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def warning(self, msg: str, *args: object) -> None:
            self.lines.append(msg % args)

    log = Log()
    started = time.perf_counter()
    estimate = estimate_or_hold(engine, "extraction", dg.AssetKey([unique, "llm_extraction"]), ["a--1"], log)
    assert estimate is None and time.perf_counter() - started < PROBE_TIMEOUT_S + 3
    (line,) = log.lines
    assert "\n" not in line and line.startswith(f"{unique}/llm_extraction: the store is unavailable: ")
    assert line.endswith("held, not estimated (the next tick tries again)")
