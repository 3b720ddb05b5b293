"""Dagster's overhead against `rag ingest` for small changes, paired, in one run on the same Neo4j.

Two copies of the company_x_kb corpus become two packs of one throwaway config (the hash embedder
``hash-embed-384`` pinned, extraction off: no model call is measured). One is ingested by the
engine's own pipeline (what `rag ingest` runs: ``ingest_pack(skip_unchanged=True)``), the other
by Dagster (the document sensor, the automation sensor's evaluation, and an in-process run of what
they request, on a SQLite instance). Both run warm in this process, so import and start-up time is
not counted on either side. Each repeat measures, in alternating order:

- ``no_change``: CLI no-change ingest vs one Dagster tick with nothing changed (document sensor +
  automation evaluation);
- ``one_doc``: the same document edited in both corpora; CLI ingest vs the Dagster tick that
  finds it and runs what its sensors request (the next tick, untimed, must find nothing to do).

    python -m rag_assets.overhead_bench [--repeat 5] [--postgres] [--profile dagster_no_change]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from rag_engine.packs import load_yaml

ROOT = Path(__file__).resolve().parents[2]
SOURCE_PACK = "company_x_kb"
EMBEDDER = "hash-embed-384"
RANGE = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")


def write_config(tmp: Path, names: list[str]) -> Path:
    """The shipped config with only copies of the KB pack (one per name), each on its own corpus copy."""
    source = ROOT / "config" / "engine.yaml"
    cfg = load_yaml(source.read_text(), source=str(source), what="engine config")
    entry = next(p for p in cfg["packs"] if p["name"] == SOURCE_PACK)
    packs = []
    for name in names:
        corpus = tmp / name
        shutil.copytree(ROOT / entry["corpus"], corpus)
        packs.append({**entry, "name": name, "corpus": str(corpus), "extraction": False})
    cfg["packs"] = packs
    collections = set(entry["collections"])
    cfg["roles"] = {role: [c for c in cols if c in collections] for role, cols in cfg["roles"].items()}
    cfg["defaults"]["embedding_model"] = EMBEDDER
    cfg["storage"]["artifacts_dir"] = str(tmp / "artifacts")
    cfg["evals"]["golden"] = [g for g in cfg["evals"]["golden"] if SOURCE_PACK in g]
    path = tmp / "engine.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


class DagsterSide:
    """One pack driven the way the daemon drives it: document sensor, automation tick, runs."""

    def __init__(self, defs: Any, instance: Any, pack: str):
        import dagster as dg

        self.dg, self.defs, self.instance, self.pack = dg, defs, instance, pack
        self.cursor: Any = None
        self.sensor = defs.resolve_sensor_def(f"{pack}__new_document_versions")
        self.job = defs.resolve_job_def(f"{pack}__ingest")
        self.graph = defs.resolve_asset_graph()
        self.runs = 0

    def document_tick(self) -> list[tuple[str, ...]]:
        """The document sensor; its partition requests applied, its run requests returned."""
        dg = self.dg
        ctx = dg.build_sensor_context(instance=self.instance, resources={"rag": self.defs.resources["rag"]})
        result = self.sensor(ctx)
        if not isinstance(result, dg.SensorResult):
            return []
        for req in result.dynamic_partitions_requests or []:
            if isinstance(req, dg.AddDynamicPartitionsRequest):
                self.instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
            else:
                for key in req.partition_keys:
                    self.instance.delete_dynamic_partition(req.partitions_def_name, key)
        return [(r.tags[RANGE[0]], r.tags[RANGE[1]]) for r in result.run_requests or []]

    def automation_tick(self) -> tuple[list[Any], list[str]]:
        """The automation sensor's evaluation over every asset: (pack assets requested, partitions)."""
        result = self.dg.evaluate_automation_conditions(defs=self.defs, instance=self.instance, cursor=self.cursor)
        self.cursor = result.cursor
        keys = [k for k in self.graph.get_all_asset_keys() if k.path[0] == self.pack and result.get_num_requested(k)]
        parts = {p for k in keys for p in result.get_requested_partitions(k)}
        return keys, [p for p in self.partitions() if p in parts]

    def partitions(self) -> list[str]:
        return list(self.instance.get_dynamic_partitions(f"{self.pack}__document_versions"))

    def execute(self, first: str, last: str, keys: list[Any] | None = None) -> None:
        job = (
            self.job
            if keys is None
            else self.defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=set(keys))
        )
        run = job.execute_in_process(
            instance=self.instance, raise_on_error=False, tags={RANGE[0]: first, RANGE[1]: last}
        )
        self.runs += 1
        if not run.success:
            raise RuntimeError([e.message for e in run.all_events if e.is_failure])

    def tick(self) -> int:
        """One daemon round: the document sensor's runs, then the automation sensor's; returns runs made."""
        made = 0
        for first, last in self.document_tick():
            self.execute(first, last)
            made += 1
        keys, parts = self.automation_tick()
        if keys:
            self.execute(parts[0], parts[-1], keys)
            made += 1
        return made

    def settle(self, max_rounds: int = 6) -> int:
        """Ticks until a tick makes no run; returns the runs made."""
        runs = 0
        for _ in range(max_rounds):
            made = self.tick()
            runs += made
            if not made:
                return runs
        raise RuntimeError(f"{self.pack}: still requesting runs after {max_rounds} ticks")


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def _edit(corpus: Path, name: str, i: int) -> None:
    path = corpus / name
    path.write_text(path.read_text(encoding="utf-8") + f"\nRevision note {i}: reviewed.\n", encoding="utf-8")


def _row(label: str, cli: list[float], dag: list[float]) -> dict[str, Any]:
    ratios = [d / c for c, d in zip(cli, dag, strict=True)]
    return {
        "case": label,
        "cli_min_s": round(min(cli), 4),
        "cli_median_s": round(statistics.median(cli), 4),
        "dagster_min_s": round(min(dag), 4),
        "dagster_median_s": round(statistics.median(dag), 4),
        "ratio_min": round(min(ratios), 2),
        "ratio_median": round(statistics.median(ratios), 2),
        "n": len(ratios),
    }


def _cleanup(engine: Any, packs: list[str], drop_index: bool) -> None:
    from rag_engine.store import schema
    from rag_engine.store.measurement import drop_pack

    for pack in packs:
        drop_pack(engine.driver, engine.database, pack)
    if drop_index and schema.current_embedder(engine.driver, engine.database):
        # the bench built the first index: leave the database as it found it
        schema.reset_vector_index(engine.driver, engine.database)


def run(repeat: int, doc: str, profile: str | None, postgres: bool = False) -> dict[str, Any]:
    import dagster as dg

    from rag_assets.definitions import build_definitions
    from rag_assets.resources import engine_for
    from rag_engine.ingest.pipeline import ingest_pack

    tag = uuid.uuid4().hex[:6]
    cli_pack, dag_pack = f"bench_cli_{tag}", f"bench_dag_{tag}"
    tmp = Path(tempfile.mkdtemp(prefix="dagster-overhead-"))
    os.environ.setdefault("RAG_LEDGER_URL", f"sqlite:///{tmp / 'ledger.sqlite'}")
    config = write_config(tmp, [cli_pack, dag_pack])
    defs = build_definitions(str(config))
    engine = engine_for(str(config))
    (tmp / "dagster").mkdir()
    if postgres:  # config/dagster-postgres.yaml: storage at DAGSTER_PG_URL
        shutil.copy(ROOT / "config" / "dagster-postgres.yaml", tmp / "dagster" / "dagster.yaml")
        instance = dg.DagsterInstance.from_config(str(tmp / "dagster"))
    else:  # config/dagster.yaml's default: SQLite
        instance = dg.DagsterInstance.local_temp(str(tmp / "dagster"))
    dag = DagsterSide(defs, instance, dag_pack)
    from rag_engine.store import schema

    meta = schema.current_embedder(engine.driver, engine.database)
    if meta and meta["identity"] != engine.registry.embedding.identity:
        raise SystemExit(
            f"this database's chunk index is built with {meta['identity']!r}; the bench pins {EMBEDDER!r} "
            "(embedding is not measured): run it on a database without a chunk index or with that embedder's"
        )

    def cli() -> Any:
        return ingest_pack(engine, engine.pack(cli_pack), skip_unchanged=True)

    profiler = cProfile.Profile() if profile else None
    out: dict[str, Any] = {"packs": [cli_pack, dag_pack], "doc": doc, "repeat": repeat}
    try:
        setup_cli, _ = _timed(cli)
        setup_dag, runs = _timed(dag.settle)
        out["initial_ingest_s"] = {"cli": round(setup_cli, 2), "dagster": round(setup_dag, 2), "dagster_runs": runs}
        samples: dict[str, dict[str, list[float]]] = {c: {"cli": [], "dagster": []} for c in ("no_change", "one_doc")}
        dag_runs: list[int] = []
        for i in range(repeat):
            order = ("cli", "dagster") if i % 2 == 0 else ("dagster", "cli")
            for side in order:  # nothing changed
                if side == "cli":
                    seconds, reports = _timed(cli)
                    assert not any(r.done for r in reports.values()), "a no-change CLI run did work"
                else:
                    if profiler and profile == "dagster_no_change":
                        profiler.enable()
                    seconds, made = _timed(dag.tick)
                    if profiler:
                        profiler.disable()
                    assert made == 0, "a no-change Dagster tick made a run"
                samples["no_change"][side].append(seconds)
            _edit(tmp / cli_pack, doc, i)
            _edit(tmp / dag_pack, doc, i)
            for side in order:  # one document changed
                if side == "cli":
                    seconds, _ = _timed(cli)
                else:
                    if profiler and profile == "dagster_one_doc":
                        profiler.enable()
                    seconds, made = _timed(dag.tick)
                    if profiler:
                        profiler.disable()
                    dag_runs.append(made + dag.settle())  # untimed: a later tick must find nothing to do
                samples["one_doc"][side].append(seconds)
        out["rows"] = [_row(case, s["cli"], s["dagster"]) for case, s in samples.items()]
        out["dagster_runs_per_one_doc_change"] = dag_runs
    finally:
        _cleanup(engine, [cli_pack, dag_pack], drop_index=meta is None)
        shutil.rmtree(tmp, ignore_errors=True)
    if profiler:
        stats = pstats.Stats(profiler)
        stats.sort_stats("cumulative").print_stats(40)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--doc", default="rb-2-on-call.md", help="the document edited in the one-document case")
    ap.add_argument("--profile", choices=["dagster_no_change", "dagster_one_doc"], default=None)
    ap.add_argument("--postgres", action="store_true", help="Dagster storage in PostgreSQL at DAGSTER_PG_URL")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = run(args.repeat, args.doc, args.profile, args.postgres)
    out["instance"] = "postgres" if args.postgres else "sqlite"
    out["uptime"] = os.getloadavg()
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"instance {out['instance']}; initial ingest: {out['initial_ingest_s']}; load average {out['uptime']}")
    print("| case | CLI min / median s | Dagster min / median s | Dagster/CLI min / median | n |")
    print("|---|---|---|---|---|")
    for r in out["rows"]:
        print(
            f"| {r['case']} | {r['cli_min_s']} / {r['cli_median_s']} | {r['dagster_min_s']} / "
            f"{r['dagster_median_s']} | {r['ratio_min']} / {r['ratio_median']} | {r['n']} |"
        )
    print(f"Dagster runs per one-document change: {out['dagster_runs_per_one_doc_change']}")


if __name__ == "__main__":
    main()
