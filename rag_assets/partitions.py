"""One dynamic partitions definition per pack, keyed `<doc_id>--<version>`."""

from __future__ import annotations

import dagster as dg


def document_versions(pack_name: str) -> dg.DynamicPartitionsDefinition:
    return dg.DynamicPartitionsDefinition(name=f"{pack_name}__document_versions")


def partitions_name(parts: dg.DynamicPartitionsDefinition) -> str:
    """The instance-level name of a dynamic partitions definition (``document_versions`` always sets one)."""
    if parts.name is None:
        raise ValueError("a dynamic partitions definition without a name has no partitions in the instance")
    return parts.name
