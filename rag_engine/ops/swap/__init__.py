"""Provider replacement dry run: what swapping one role's model would change, before anyone does it.

    dry_run.dry_run(engine, role=R, candidate=MODEL)        # the current config with R's default replaced
    dry_run.dry_run(engine, role=R, candidate_config=FILE)  # the current config against a whole candidate file
    render.render_text(report) -> str                       (``rag providers swap``; the Dagster job
                                                            ``provider_swap_dry_run`` stores the same report)

Why a dry run and not a doc: a swap fails in ways only the data and the environment know (the
credential variable is not set in this deployment, the local server is down, the candidate lacks a
capability the engine calls, the index holds N chunks in another vector space). The report says each
of those with figures, names credential *variables* only (never a value), and proves the
application needs no code change by loading the engine and the Dagster Definitions with the candidate
config in a fresh interpreter. It changes nothing: the only model call is an optional sample of a few
passages through a candidate embedder (to measure its rate), recorded in the ledger like any other.

Roles: ``generation`` (defaults.generation_model), ``embedding`` (defaults.embedding_model),
``extraction`` (defaults.extraction_model, else the generation model), ``local_inference``
(defaults.local_inference_model; query expansion and rerank).

Modules (each imports only those above it; nothing is re-exported here):

- ``report``: the report's pydantic types (``SwapReport``, ``Identity``, ...) and ``Role``
- ``candidate``: the candidate config for a role, its diff against the current one, capability losses
- ``probes``: identities and reachability, Neo4j and ledger figures, the embedding rate, the load check
- ``consequences``: pricing, and the re-index / re-extraction / eval the swap calls for
- ``rollback``: how to restore the current config
- ``dry_run``: ``dry_run`` itself
- ``render``: ``render_text``
"""
