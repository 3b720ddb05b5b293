"""The query path, without the orchestrator: ``query.run_query`` from question to cited answer.

- ``retriever``: the policy gate applied, exact reference hits, fulltext and vector legs, the
  planner's graph candidates, fusion and reference expansion
- ``live_source``: the live SQL leg
- ``rerank`` / ``local_inference``: the feature reranker, and the optional local model's
  expansion and rerank
- ``context``: the typed context assembler with per-category budgets
- ``evidence``: the evidence floor (how much of the question the context covers)
- ``answer``: cited answers (generated, extractive, or insufficient evidence)
- ``outcome``: what a query returns, and its audit record
"""
