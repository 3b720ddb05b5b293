"""domain_packs: which packs are enabled, by config alone, and which of them failed to load.

A pack that fails to load is left out of the code location (its assets are absent) instead of
taking every pack down; the failed ``packs_loaded`` check names it with its typed error.
"""

import dagster as dg

from rag_assets.automation import on_change_or_first
from rag_assets.resources import EngineResource
from rag_engine.ops.pack_report import pack_summary

KEY = dg.AssetKey("domain_packs")


def build_domain_packs(code_version: str) -> dg.AssetsDefinition:
    """``code_version`` changes with the enabled packs and their load errors: a fixed or newly
    broken pack re-materializes it (and its check) by itself; a fresh instance materializes it once."""

    @dg.asset(
        key=KEY,
        code_version=code_version,
        group_name="platform",
        kinds={"python"},
        owners=["team:rag-platform"],
        tags={"cost": "free"},
        automation_condition=on_change_or_first(),
        check_specs=[
            dg.AssetCheckSpec(
                "packs_loaded",
                asset=KEY,
                description="ERROR when an enabled pack failed to load (its assets "
                "are absent); the description names each with its "
                "typed error.",
            )
        ],
        description="Enabled domain packs with their domains and versions, and the packs that failed to load.",
    )
    def domain_packs(rag: EngineResource) -> dg.MaterializeResult:
        summary = pack_summary(rag.engine())
        broken = rag.broken_packs()
        return dg.MaterializeResult(
            metadata={
                "pack_count": summary["pack_count"],
                "broken_pack_count": len(broken),
                "domains": dg.MetadataValue.json(summary["domains"]),
                "versions": dg.MetadataValue.json(summary["versions"]),
                "broken": dg.MetadataValue.json(broken),
            },
            check_results=[
                dg.AssetCheckResult(
                    check_name="packs_loaded",
                    passed=not broken,
                    severity=dg.AssetCheckSeverity.ERROR,
                    metadata={"broken": dg.MetadataValue.json(broken)},
                    description="; ".join(f"{name}: {err}" for name, err in sorted(broken.items()))
                    or f"all {summary['pack_count']} enabled packs loaded",
                )
            ],
        )

    return domain_packs
