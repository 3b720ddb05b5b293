"""The `dg` defs folder: definitions written as files, as `dg scaffold defs` makes them.

The engine-built definitions (every pack's ingestion assets, their sensors and jobs, the platform
assets, the eval gate) depend on the config and the enabled packs, so ``rag_assets.definitions``
builds them in code and merges in whatever this folder holds (``dg.load_from_defs_folder``):
``dg scaffold defs dagster.asset my_asset.py`` writes here, and ``dg list defs`` / ``dg dev``
(``make dev``) show it beside the rest. Empty in the shipped project.
"""
