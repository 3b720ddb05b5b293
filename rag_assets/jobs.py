"""Jobs: one ingestion job per pack (all its partitioned assets)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import dagster as dg

if TYPE_CHECKING:  # define_asset_job's return type, which dagster does not export
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition


def ingestion_job(pack_name: str) -> UnresolvedAssetJobDefinition:
    return dg.define_asset_job(
        name=f"{pack_name}__ingest",
        selection=dg.AssetSelection.key_prefixes([pack_name]),
        description=f"Ingest document versions of the {pack_name} pack end to end.",
    )
