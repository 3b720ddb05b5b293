"""RAG engine: the query path and offline building blocks. Never imports dagster."""
