"""Test-only helpers (loopback servers, fixtures); never imported by the engine."""
