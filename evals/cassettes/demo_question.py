"""The `make demo` question: the demo (``rag_assets.demo``) asks it and the demo cassette holds
its recorded answer (``build_demo_cassette.build_demo_answer``). It lives with the evals because
the Dagster layer imports the evals and never the other way round."""

QUESTION = "Within how many hours must a controller notify a personal data breach to the supervisory authority?"
"""A golden question (legal-002): its answer is in the demo cassette, so the recorded model answers."""
ROLE = "public"
