"""Provider layer: every model call in the project goes through here.

``clients.build_client`` turns a registry ``ModelSpec`` into a ``ModelClient`` (hosted OpenAI,
OpenAI-compatible local servers, recorded cassettes, the built-in hash embedder). Each call is
capability-checked before any network I/O, rate limited, retried on its own terms, priced from
the versioned pricing table and written to the append-only usage ledger.
"""
