"""One dynamic partitions definition per pack, keyed `<doc_id>--<version>`."""

from __future__ import annotations

import dagster as dg


def document_versions(pack_name: str) -> dg.DynamicPartitionsDefinition:
    return dg.DynamicPartitionsDefinition(name=f"{pack_name}__document_versions")
