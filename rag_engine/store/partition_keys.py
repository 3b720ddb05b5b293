"""What a document-version partition key may be: ``<doc id>--<12 hex>``, checked at every entry.

A partition key becomes a folder name under the artifacts root and a document id in the store.
Dagster accepts nearly any string as a dynamic partition (the UI's "add partition", GraphQL
``addDynamicPartition``), so a key such as ``../../outside/planted--aaaaaaaaaaaa`` would walk out
of the artifacts folder and serve a file that was never in the corpus. Every step checks the key
with ``check`` before it touches a file, and ``ArtifactStore`` refuses any path component that
is not a plain name.

A doc id is what ``documents.doc_id_for`` makes of a file name: ASCII letters, digits and
``_.-``, never starting with a dot (hidden files are not documents).
"""

from __future__ import annotations

import re

from rag_engine.errors import BadPartitionKey

PARTITION_SEP = "--"
VERSION_CHARS = 12
MAX_DOC_ID_CHARS = 255
"""A file name's limit on common file systems; a doc id never exceeds its file's name."""

_DOC_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")
_VERSION = re.compile(rf"[0-9a-f]{{{VERSION_CHARS}}}")


def check(key: str) -> tuple[str, str]:
    """``(doc_id, version)`` of a well-formed key, or BadPartitionKey saying what is wrong."""
    if not isinstance(key, str):
        raise BadPartitionKey(f"not a document-version partition key: {key!r}")
    shown = key if len(key) <= 120 else f"{key[:120]}..."
    doc_id, sep, version = key.rpartition(PARTITION_SEP)
    if not sep or not doc_id or not version:
        raise BadPartitionKey(f"not a document-version partition key: {shown!r} (expected <doc_id>--<version>)")
    if not _VERSION.fullmatch(version):
        raise BadPartitionKey(f"partition key {shown!r}: the version must be {VERSION_CHARS} lowercase hex digits")
    if len(doc_id) > MAX_DOC_ID_CHARS or not _DOC_ID.fullmatch(doc_id):
        raise BadPartitionKey(
            f"partition key {shown!r}: a document id is at most {MAX_DOC_ID_CHARS} ASCII letters, digits "
            "and '_.-', not starting with '.'"
        )
    return doc_id, version


def is_valid(key: str) -> bool:
    try:
        check(key)
    except BadPartitionKey:
        return False
    return True
