"""One dynamic partitions definition per pack, keyed `<doc_id>--<version>`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import dagster as dg

DEFAULT_PACKS = ("legal_regulatory", "company_x_kb")
"""The demo packs: ``make demo`` ingests them and their document sensors start running by default.
Any other pack's sensor starts stopped (an operator turns it on, or runs ``rag ingest --pack``), so
``make dev`` never starts ingesting a pack that was never ingested (ADGM: 1,912 chunks)."""


def demo_pack_names(wanted: str | None = None) -> list[str] | None:
    """The packs named by ``DEMO_PACKS`` (comma-separated; ``all`` gives None: every pack)."""
    wanted = os.environ.get("DEMO_PACKS") if wanted is None else wanted
    if wanted == "all":
        return None
    return [n.strip() for n in (wanted or ",".join(DEFAULT_PACKS)).split(",") if n.strip()]


def runs_by_default(pack_name: str) -> bool:
    names = demo_pack_names()
    return names is None or pack_name in names


def document_versions(pack_name: str) -> dg.DynamicPartitionsDefinition:
    return dg.DynamicPartitionsDefinition(name=f"{pack_name}__document_versions")


def partitions_name(parts: dg.DynamicPartitionsDefinition) -> str:
    """The instance-level name of a dynamic partitions definition (``document_versions`` always sets one)."""
    if parts.name is None:
        raise ValueError("a dynamic partitions definition without a name has no partitions in the instance")
    return parts.name


def partial_reason(figures: Mapping[str, Any]) -> str:
    """Why an extraction partition is ``partial`` and what happens next, as it is: the document
    sensor continues a partition the run budget stopped (its failed calls are retried in the same
    run); nothing retries failed calls by themselves, the operator re-runs the partition."""
    skipped, failed = int(figures.get("skipped", 0)), int(figures.get("failed", 0))
    cached = "answered chunks come from the cache"
    if skipped:
        also = f" and {failed} failed call(s)" if failed else ""
        return (
            f"{skipped} chunk(s) left by the run budget{also}: the pack's document sensor continues the "
            f"partition on its next tick (when the sensor is on); {cached}"
        )
    if failed:
        return (
            f"{failed} failed call(s), not retried by themselves: materialize the partition again "
            f"(or `rag ingest --pack`) to retry them; {cached}"
        )
    return "left unfinished: materialize the partition again"
