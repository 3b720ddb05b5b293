"""Dagster layer: thin wrappers that schedule and observe rag_engine's steps."""
