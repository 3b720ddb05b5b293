"""Rule changes become asset staleness, asserted with Dagster's own staleness resolver."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from dagster._core.definitions.data_version import StaleStatus
from dagster._utils.test.data_versions import get_stale_status_resolver

from rag_assets.definitions import build_definitions
from rag_assets.demo import materialize_pack

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("source_documents", "chunks", "references", "chunk_index", "llm_extraction", "graph_writes")


def _stale(defs: dg.Definitions, instance: dg.DagsterInstance, pack: str, keys: list[str]) -> set[str]:
    resolver = get_stale_status_resolver(instance, list(defs.assets))
    stale = set()
    for step in STEPS:
        statuses = {resolver.get_status(dg.AssetKey([pack, step]), k) for k in keys}
        assert StaleStatus.MISSING not in statuses, step
        if StaleStatus.STALE in statuses:
            stale.add(step)
    return stale


def test_rule_changes_mark_exactly_the_right_assets_stale(variant, unique):
    defs = build_definitions(variant("base"))
    instance = dg.DagsterInstance.ephemeral()
    pack = defs.resources["rag"].engine().pack(unique)
    result = materialize_pack(defs, instance, pack)
    assert result.success
    keys = list(instance.get_dynamic_partitions(f"{unique}__document_versions"))
    assert len(keys) == 2
    assert _stale(defs, instance, unique, keys) == set()

    # pack manifest version: re-extraction. Dagster reports the assets whose own code version
    # changed; their dependents turn stale once those produce a new data version (below).
    bumped = build_definitions(variant("bumped", manifest_version="1.0.1"))
    assert _stale(bumped, instance, unique, keys) == {"chunks", "references", "llm_extraction"}

    # another extraction model: re-extraction only
    def other_model(text: str) -> str:
        text = text.replace("  extraction_model: demo-chat", "  extraction_model: local-chat")
        return text.replace(
            "    kind: openai_compatible\n    hosted: false\n    enabled: false",
            "    kind: openai_compatible\n    hosted: false\n    enabled: true",
        )

    model = build_definitions(variant("model", edit=other_model))
    assert _stale(model, instance, unique, keys) == {"llm_extraction"}

    # traversal policy / target resolution: graph rebuild only
    traversal = build_definitions(
        variant("traversal", edit=lambda s: s.replace('policy_version: "1"', 'policy_version: "2"'))
    )
    assert _stale(traversal, instance, unique, keys) == {"graph_writes"}
    target = build_definitions(
        variant("target", edit=lambda s: s.replace('target_resolution_version: "1"', 'target_resolution_version: "2"'))
    )
    assert _stale(target, instance, unique, keys) == {"graph_writes"}

    # embedder identity: the chunk index only (a full re-index)
    embedder = build_definitions(variant("embedder", edit=lambda s: s.replace("dimension: 384", "dimension: 256")))
    assert _stale(embedder, instance, unique, keys) == {"chunk_index"}

    # re-extracting under the bumped rules propagates: the index and graph built on it go stale
    job = bumped.resolve_implicit_global_asset_job_def().get_subset(asset_selection={dg.AssetKey([unique, "chunks"])})
    rerun = job.execute_in_process(
        instance=instance,
        tags={"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]},
    )
    assert rerun.success
    assert _stale(bumped, instance, unique, keys) == {"references", "llm_extraction", "chunk_index"}


def test_one_run_materializes_every_partition(variant, unique):
    defs = build_definitions(variant("base"))
    instance = dg.DagsterInstance.ephemeral()
    pack = defs.resources["rag"].engine().pack(unique)
    result = materialize_pack(defs, instance, pack)
    assert result.success
    runs = instance.get_runs()
    assert len(runs) == 1
    mats = result.asset_materializations_for_node(f"{unique}__chunks")
    assert sorted(m.partition for m in mats) == sorted(instance.get_dynamic_partitions(f"{unique}__document_versions"))


def test_a_generation_model_change_makes_only_the_eval_stale(variant):
    """A new default generation model changes what the eval measures (the answers), nothing the
    pipeline builds: only eval_report's code version moves, so the eval and its gate must rerun."""

    def versions(defs: dg.Definitions) -> dict[dg.AssetKey, str | None]:
        return {spec.key: spec.code_version for asset in defs.assets for spec in asset.specs}

    def other_generation(text: str) -> str:
        text = text.replace("  generation_model: demo-chat", "  generation_model: local-chat")
        return text.replace(
            "    kind: openai_compatible\n    hosted: false\n    enabled: false",
            "    kind: openai_compatible\n    hosted: false\n    enabled: true",
        )

    base, other = (
        versions(build_definitions(variant("base"))),
        versions(build_definitions(variant("gen", edit=other_generation))),
    )
    assert base.keys() == other.keys()
    assert [k.to_user_string() for k in base if base[k] != other[k]] == ["eval_report"]
