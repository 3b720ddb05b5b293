"""What an operator runs and reads about the engine; nothing on the query path imports it.

- ``status``: the state of the store, packs, runs and automation (``rag status``)
- ``costs``: the usage ledger summed by model and purpose (``rag costs``)
- ``quality_per_dollar``: eval quality against what it cost, per model
- ``pack_lint`` / ``pack_report``: checks and figures of domain packs (``rag packs``)
- ``swap``: a provider replacement dry run with probes, pricing and rollback (``rag swap``)
"""
