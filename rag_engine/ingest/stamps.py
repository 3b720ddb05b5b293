"""Change detection for `rag ingest`: which steps of a document version are already done.

A partition key carries the document's content hash, so "same content, same step code" is "same
partition key, same code version". Per (pack, partition, step) the code version of the last
successful run is stored on the partition's (:DocumentVersion) node (``step_versions``, a JSON
object), not in the artifacts dir: a stamp then lives and dies with what it vouches for. A wiped
store, a version that never went live (failed index) or one superseded and later restored by a
revert has no valid stamp, so its steps run again. Only ``current`` versions are read.

`rag ingest` writes a partition's stamps as its step's work commits (``RunStamps``: after each
grouped transaction, each extraction), so a run killed half way keeps what it finished; the Dagster
assets stamp each step as it finishes (``record_step``). Both write on the version node while it
is still pending too, and drop the stamps of the steps downstream of it, which must run again. So
either orchestrator sees the other's work as done: after a Dagster materialization `rag ingest`
finds nothing to do, and after `rag ingest` the assets skip the work of partitions whose stamp
matches.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

import neo4j

from rag_engine.graph.writer import version_key
from rag_engine.store import stamps as stored

STEP_DEPS: dict[str, tuple[str, ...]] = {
    "source_documents": (),
    "chunks": ("source_documents",),
    "references": ("chunks",),
    "chunk_index": ("chunks",),
    "llm_extraction": ("chunks",),
    "graph_writes": ("references", "chunk_index", "llm_extraction"),
}
"""What each step reads: a partition that re-ran a step re-runs every step downstream of it."""


def downstream(step: str) -> set[str]:
    """Every step that reads ``step``'s output, directly or not."""
    out: set[str] = set()
    todo = [step]
    while todo:
        current = todo.pop()
        for name, deps in STEP_DEPS.items():
            if current in deps and name not in out:
                out.add(name)
                todo.append(name)
    return out


def stamped(stamps: Mapping[str, str], step: str, version: str | None) -> dict[str, str]:
    """``stamps`` after ``step`` ran at ``version``: its stamp set, its downstream steps' dropped.

    ``version`` None: the step ran but did not finish its output (an extraction the run budget
    stopped, or with failed calls): its own stamp is dropped too, so the next run of either
    orchestrator continues it, and everything downstream, built on what changed, runs again."""
    gone = downstream(step) | ({step} if version is None else set())
    kept = {k: v for k, v in stamps.items() if k not in gone}
    return kept if version is None else {**kept, step: version}


def read_stamps(driver: neo4j.Driver, database: str, pack: str) -> dict[str, dict[str, str]]:
    """partition key -> {step: code version} for the pack's current document versions."""
    prefix = version_key(pack, "")
    out: dict[str, dict[str, str]] = {}
    for key, raw in stored.current_stamps(driver, database, pack):
        out[key[len(prefix) :]] = _decode(raw)
    return out


def write_stamps(driver: neo4j.Driver, database: str, pack: str, stamps: Mapping[str, Mapping[str, str]]) -> int:
    """Store the stamps of the given partitions (pending or current versions take them: a pending
    one's are read once it goes live); no call when empty."""
    rows = [
        {"key": version_key(pack, key), "stamps": json.dumps(dict(sorted(s.items())), sort_keys=True)}
        for key, s in stamps.items()
    ]
    if not rows:
        return 0
    stored.write_stamps(driver, database, rows)
    return len(rows)


class RunStamps:
    """One `rag ingest` run's stamps: each partition's whole stamp set as its steps finish, written
    by ``flush`` when it changed since it was last read or written (a run with nothing to do writes
    nothing)."""

    def __init__(self, driver: neo4j.Driver, database: str, pack: str, old: Mapping[str, Mapping[str, str]]):
        self._driver, self._database, self._pack = driver, database, pack
        self._written = {k: dict(v) for k, v in old.items()}
        self._now: dict[str, dict[str, str]] = {}

    def step_done(self, key: str, step: str, version: str | None) -> None:
        """``step`` of ``key`` ran at ``version`` (None: partial, see ``stamped``)."""
        self._now[key] = stamped(self._now.get(key, self._written.get(key, {})), step, version)

    def flush(self) -> int:
        changed = {k: s for k, s in self._now.items() if s != self._written.get(k)}
        self._written.update(changed)
        return write_stamps(self._driver, self._database, self._pack, changed)


def _decode(raw: object) -> dict[str, str]:
    try:
        stamps = json.loads(raw) if isinstance(raw, str) and raw else {}
    except ValueError:  # unreadable stamp: no stamp, the steps run again
        stamps = {}
    return stamps if isinstance(stamps, dict) else {}


def record_step(
    driver: neo4j.Driver, database: str, pack: str, step: str, version: str | None, keys: Iterable[str]
) -> int:
    """Stamp ``step`` at ``version`` on these partitions' version nodes (pending or current; a
    partition without one, e.g. a new version before chunks wrote it, is left out) and drop the
    stamps of its downstream steps (``version`` None: a partial run, whose own stamp goes too).
    One write transaction that locks the nodes before reading them, so steps finishing
    concurrently on one partition do not lose each other's stamp."""
    prefix = version_key(pack, "")
    wanted = [version_key(pack, k) for k in keys]
    if not wanted:
        return 0

    def work(tx: neo4j.ManagedTransaction) -> int:
        rows = [
            {"key": key, "stamps": json.dumps(stamped(_decode(raw), step, version), sort_keys=True)}
            for key, raw in stored.lock_live(tx, wanted)
            if key.startswith(prefix)
        ]
        if rows:
            stored.set_stamps(tx, rows)
        return len(rows)

    with driver.session(database=database) as session:
        return session.execute_write(work)


def any_missing(driver: neo4j.Driver, database: str, pack: str, present: list[str]) -> bool:
    """Whether a current document, or one owning keys, is no longer in the corpus (read-only, so a
    no-change run writes nothing)."""
    return stored.any_missing(driver, database, pack, present)
