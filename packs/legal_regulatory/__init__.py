"""GDPR pack (legal domain): articles and recitals, deterministic legal citation references."""
