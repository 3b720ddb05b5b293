"""Small changes through Dagster: one document change materializes each stale asset once per
partition (the document sensor and the automation sensor do not both run it), and the assets
share `rag ingest`'s step stamps, so neither orchestrator redoes the other's work."""

from __future__ import annotations

from collections import Counter

import dagster as dg

from rag_assets.definitions import build_definitions
from rag_engine.ingest.pipeline import ingest_pack
from tests.support.packs import RUNBOOK

RANGE = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")
STEPS = ["source_documents", "chunks", "references", "chunk_index", "llm_extraction", "graph_writes"]


class Daemon:
    """What the daemon does for one pack: the document sensor's tick (its partition requests
    applied, its run executed), then the automation sensor's tick (its requests executed)."""

    def __init__(self, defs: dg.Definitions, pack: str):
        self.defs, self.pack = defs, pack
        self.instance = dg.DagsterInstance.ephemeral()
        self.cursor = None
        self.parts = f"{pack}__document_versions"

    def _execute(self, keys: set[dg.AssetKey], partitions: list[str]) -> list[dg.AssetMaterialization]:
        ordered = [p for p in self.instance.get_dynamic_partitions(self.parts) if p in set(partitions)]
        job = self.defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=keys)
        run = job.execute_in_process(
            instance=self.instance, raise_on_error=False, tags={RANGE[0]: ordered[0], RANGE[1]: ordered[-1]}
        )
        assert run.success, [e.message for e in run.all_events if e.is_failure]
        return [e.event_specific_data.materialization for e in run.get_asset_materialization_events()]

    def document_tick(self) -> list[dg.AssetMaterialization]:
        return self.execute_runs(self.document_sensor())

    def document_sensor(self) -> list[dg.RunRequest]:
        """The document sensor's tick with its partition requests applied: the runs it requested."""
        sensor = self.defs.resolve_sensor_def(f"{self.pack}__new_document_versions")
        result = sensor(dg.build_sensor_context(instance=self.instance, resources={"rag": self.defs.resources["rag"]}))
        if not isinstance(result, dg.SensorResult):
            return []
        for req in result.dynamic_partitions_requests or []:
            if isinstance(req, dg.AddDynamicPartitionsRequest):
                self.instance.add_dynamic_partitions(self.parts, list(req.partition_keys))
            else:
                for key in req.partition_keys:
                    self.instance.delete_dynamic_partition(self.parts, key)
        return list(result.run_requests or [])

    def execute_runs(self, runs: list[dg.RunRequest]) -> list[dg.AssetMaterialization]:
        done: list[dg.AssetMaterialization] = []
        graph = self.defs.resolve_asset_graph()
        pack_keys = {k for k in graph.get_all_asset_keys() if k.path[0] == self.pack}
        for run in runs:
            keys = set(run.asset_selection) if run.asset_selection else pack_keys
            start, end = run.tags[RANGE[0]], run.tags[RANGE[1]]
            parts = list(self.instance.get_dynamic_partitions(self.parts))
            done += self._execute(keys, parts[parts.index(start) : parts.index(end) + 1])
        return done

    def automation_requests(self) -> tuple[set[dg.AssetKey], list[str]]:
        """The automation sensor's tick: the pack's assets and partitions it requests."""
        selection = dg.AssetSelection.key_prefixes([self.pack])
        result = dg.evaluate_automation_conditions(
            defs=self.defs, instance=self.instance, cursor=self.cursor, asset_selection=selection
        )
        self.cursor = result.cursor
        graph = self.defs.resolve_asset_graph()
        keys = {k for k in graph.get_all_asset_keys() if k.path[0] == self.pack and result.get_num_requested(k)}
        return keys, sorted({p for k in keys for p in result.get_requested_partitions(k)})

    def automation_tick(self) -> list[dg.AssetMaterialization]:
        keys, partitions = self.automation_requests()
        if not keys:
            return []
        return self._execute(keys, partitions)

    def tick(self) -> list[dg.AssetMaterialization]:
        return self.document_tick() + self.automation_tick()


def _per_partition(mats: list[dg.AssetMaterialization]) -> Counter[tuple[str, str]]:
    return Counter((m.asset_key.path[-1], m.partition) for m in mats)


def _outcomes(mats: list[dg.AssetMaterialization]) -> set[str]:
    return {str(m.metadata["outcome"].value) for m in mats}


def _by_step(mats: list[dg.AssetMaterialization]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m in mats:
        out.setdefault(m.asset_key.path[-1], set()).add(str(m.metadata["outcome"].value))
    return out


def test_one_document_change_materializes_each_stale_asset_once_per_partition(variant, unique, tmp_path):
    defs = build_definitions(variant("base"))
    daemon = Daemon(defs, unique)
    first = daemon.tick() + daemon.tick() + daemon.tick()  # the sensor's run, then two automation ticks
    counts = _per_partition(first)
    keys = {p for _, p in counts}
    assert len(keys) == 2 and set(counts.values()) == {1}, counts
    assert {s for s, _ in counts} == set(STEPS)

    (tmp_path / "corpus" / "runbook.md").write_text(RUNBOOK + "\nCall the service desk.\n", encoding="utf-8")
    after = daemon.tick() + daemon.tick() + daemon.tick()
    counts = _per_partition(after)
    (new_key,) = {p for _, p in counts}
    assert new_key.startswith("runbook--") and new_key not in keys
    assert counts == Counter({(step, new_key): 1 for step in STEPS}), counts  # no second run of any


def test_a_new_document_gets_one_run_when_automation_ticks_before_the_sensors_run_starts(variant, unique, tmp_path):
    """Both sensors on, the automation tick falling between the document sensor's tick and the
    start of the run it requested (what the daemon did: two runs of the same six assets on one
    partition, started together). Counted: exactly one run per new version, the sensor's."""
    defs = build_definitions(variant("race"))
    daemon = Daemon(defs, unique)
    daemon.automation_tick()  # the automation sensor has ticked before: not its initial evaluation
    runs = daemon.document_sensor()
    assert len(runs) == 1
    assert daemon.automation_requests() == (set(), [])  # the new partitions are not automation's
    mats = daemon.execute_runs(runs)
    assert daemon.automation_tick() == []
    assert set(_per_partition(mats).values()) == {1} and len(_per_partition(mats)) == 2 * len(STEPS)

    (tmp_path / "corpus" / "runbook.md").write_text(RUNBOOK + "\nCall the service desk.\n", encoding="utf-8")
    runs = daemon.document_sensor()
    assert len(runs) == 1 and daemon.automation_requests() == (set(), [])
    counts = _per_partition(daemon.execute_runs(runs) + daemon.automation_tick() + daemon.tick())
    (new_key,) = {p for _, p in counts}
    assert counts == Counter({(step, new_key): 1 for step in STEPS}), counts


def _no_extraction(unique: str):
    """The test pack's texts are not in the demo replay cassette: extraction off (a failed call
    leaves no stamp, rightly, so the step would run again)."""
    return lambda text: text.replace(f"  - name: {unique}\n", f"  - name: {unique}\n    extraction: false\n")


def test_dagster_and_rag_ingest_share_step_stamps(variant, unique, tmp_path):
    defs = build_definitions(variant("base", edit=_no_extraction(unique)))
    engine = defs.resources["rag"].engine()
    pack = engine.pack(unique)
    daemon = Daemon(defs, unique)

    # rag ingest first: the assets materialize every partition without work
    cli = ingest_pack(engine, pack, skip_unchanged=True)
    assert all(len(r.done) == 2 for r in cli.values()), {k: len(r.done) for k, r in cli.items()}
    assert not cli["llm_extraction"].total("failed"), cli["llm_extraction"].done
    calls = len(engine.ledger.records())
    mats = daemon.tick() + daemon.tick()
    assert len(mats) == 2 * len(STEPS) and _outcomes(mats) == {"unchanged"}, _by_step(mats)
    assert len(engine.ledger.records()) == calls  # no embedding or model call

    # then Dagster ingests a changed document: rag ingest finds nothing left to do
    (tmp_path / "corpus" / "runbook.md").write_text(RUNBOOK + "\nCall the service desk.\n", encoding="utf-8")
    mats = daemon.tick() + daemon.tick()
    assert len(mats) == len(STEPS) and _outcomes(mats) == {"done"}, _by_step(mats)
    again = ingest_pack(engine, pack, skip_unchanged=True)
    assert all(not r.done and not r.failed and len(r.unchanged) == 2 for r in again.values()), {
        k: (len(r.done), len(r.unchanged)) for k, r in again.items()
    }

    # a code-version change re-runs the stale step and what follows it, once, in either
    bumped = build_definitions(
        variant(
            "traversal",
            edit=lambda s: _no_extraction(unique)(s.replace('policy_version: "1"', 'policy_version: "2"')),
        )
    )
    daemon.defs = bumped
    mats = daemon.tick() + daemon.tick()
    assert _per_partition(mats) == Counter(
        {("graph_writes", k): 1 for k in daemon.instance.get_dynamic_partitions(daemon.parts)}
    )
    eng2 = bumped.resources["rag"].engine()
    assert all(not r.done for r in ingest_pack(eng2, eng2.pack(unique), skip_unchanged=True).values())


def test_automation_cost_estimate_is_the_swap_dry_runs_token_estimator(variant, unique):
    from rag_assets.automation import extraction_estimate
    from rag_engine.graph.writer import write_extraction_run
    from rag_engine.ingest.documents import discover
    from rag_engine.ops.estimates import extraction_tokens
    from rag_engine.usage import UsageRecord

    engine = build_definitions(variant("base")).resources["rag"].engine()
    keys = [r.partition_key for r in discover(engine.pack(unique))]
    before = extraction_estimate(engine, unique, keys)  # not chunked yet: the pack chunks them, pure
    assert before["calls"] == 3 and before["tokens_from"].startswith("no ledger history")
    assert before["output_tokens"] == 3 * engine.cfg.budgets.max_output_tokens

    # the ledger's extraction calls of this pack's runs: tokens per call from history
    run_id = f"{unique}-run"
    write_extraction_run(
        engine.driver,
        engine.database,
        run_id=run_id,
        pack=unique,
        model="demo-chat",
        prompt_hash="p",
        chunks=2,
        cache_hits=0,
        tokens=1800,
        cost=None,
        status="complete",
        skipped=0,
        failures=0,
    )
    for tin, tout in ((1000, 200), (500, 100)):
        engine.ledger.record(
            UsageRecord(
                run_id=run_id,
                purpose="graph_extraction",
                provider="replay",
                requested_model="m",
                input_tokens=tin,
                output_tokens=tout,
            )
        )
    try:
        after = extraction_estimate(engine, unique, keys)
        assert (after["calls"], after["input_tokens"], after["output_tokens"]) == (3, 2250, 450)
        assert after["tokens_from"].startswith("ledger: 2 extraction calls of 1 extraction runs")
        same = extraction_tokens(engine, [unique], 3, 0)  # what the swap dry run asks for the same work
        assert (same.input_tokens, same.output_tokens) == (after["input_tokens"], after["output_tokens"])
    finally:
        engine.driver.execute_query("MATCH (r:ExtractionRun {run_id: $r}) DELETE r", r=run_id)
