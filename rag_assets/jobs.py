"""Jobs: one ingestion job per pack (all its partitioned assets)."""

from __future__ import annotations

import dagster as dg


def ingestion_job(pack_name: str):
    return dg.define_asset_job(
        name=f"{pack_name}__ingest",
        selection=dg.AssetSelection.key_prefixes([pack_name]),
        description=f"Ingest document versions of the {pack_name} pack end to end.",
    )
