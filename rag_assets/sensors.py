"""Discover new document versions: add their partitions and request one run for all of them."""


import dagster as dg

from rag_assets.partitions import document_versions
from rag_assets.resources import EngineResource
from rag_engine.documents import discover, split_partition_key


def plan_partitions(current: list[str], found: list[str]) -> tuple[list[str], list[str]]:
    """(keys to add, superseded keys to drop): a doc id whose version changed drops its old key."""
    found_set = set(found)
    found_docs = {split_partition_key(k)[0] for k in found}
    add = [k for k in found if k not in set(current)]
    superseded = [k for k in current if k not in found_set and split_partition_key(k)[0] in found_docs]
    return add, superseded


def build_document_sensor(pack_name: str, job) -> dg.SensorDefinition:
    parts = document_versions(pack_name)

    @dg.sensor(name=f"{pack_name}__new_document_versions", job=job, minimum_interval_seconds=60,
               default_status=dg.DefaultSensorStatus.STOPPED,
               description="Scans the pack corpus by content hash; new versions get partitions and one run.")
    def _sensor(context: dg.SensorEvaluationContext, rag: EngineResource) -> dg.SensorResult | dg.SkipReason:
        pack = rag.engine().pack(pack_name)
        found = [r.partition_key for r in discover(pack)]
        current = list(context.instance.get_dynamic_partitions(parts.name))
        add, superseded = plan_partitions(current, found)
        if not add and not superseded:
            return dg.SkipReason(f"no new document versions among {len(found)} documents")
        requests = [parts.build_add_request(add)] if add else []
        if superseded:
            context.log.info(f"superseded versions dropped from partitions: {superseded}")
            requests.append(parts.build_delete_request(superseded))
        runs = []
        if add:
            runs.append(dg.RunRequest(
                run_key=f"{pack_name}:{','.join(sorted(add))}"[:4000],
                tags={"dagster/asset_partition_range_start": add[0], "dagster/asset_partition_range_end": add[-1]},
            ))
        return dg.SensorResult(run_requests=runs, dynamic_partitions_requests=requests)

    return _sensor
