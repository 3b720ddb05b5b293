"""Domain packs: each subpackage brings one domain's corpus, chunking and reference rules."""
