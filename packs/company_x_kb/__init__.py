"""Company X knowledge base pack: policies, runbooks and tickets with front-matter collections."""
