"""Source documents on disk: discovery by content hash, and strict per-document validation.

A document version is the content hash of the file's bytes, so an unchanged file yields the
same partition key and adds nothing, and any edit yields a new version that supersedes the old.
Validation errors are per document (DocumentError) so one bad file never stops the others.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from rag_engine.errors import DocumentError
from rag_engine.packs import DomainPack, SourceDocument

log = logging.getLogger(__name__)
PARTITION_SEP = "--"
_DOC_ID_BAD = re.compile(r"[^A-Za-z0-9_.-]+")
VERSION_CHARS = 12


@dataclass(frozen=True)
class DocumentVersionRef:
    doc_id: str
    version: str
    path: Path

    @property
    def partition_key(self) -> str:
        return f"{self.doc_id}{PARTITION_SEP}{self.version}"


def doc_id_for(path: Path) -> str:
    return _DOC_ID_BAD.sub("_", path.stem).strip("_") or "document"


def file_version(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:VERSION_CHARS]


def split_partition_key(key: str) -> tuple[str, str]:
    doc_id, sep, version = key.rpartition(PARTITION_SEP)
    if not sep or not doc_id or not version:
        raise DocumentError(f"not a document-version partition key: {key!r} (expected <doc_id>--<version>)")
    return doc_id, version


def discover(pack: DomainPack) -> list[DocumentVersionRef]:
    """Every document file of a pack's corpus with its current version, sorted by doc id."""
    corpus = pack.corpus_dir
    if not corpus.is_dir():
        return []
    refs = [
        DocumentVersionRef(doc_id_for(p), file_version(p), p)
        for p in sorted(corpus.glob(pack.manifest.document_glob))
        if p.is_file()
    ]
    seen: dict[str, Path] = {}
    kept = []
    for r in refs:
        if r.doc_id in seen:  # one misnamed file must not stop the pack: keep the first, say so loudly
            log.error("pack %s: %s and %s map to the same document id %r; %s is skipped until renamed",
                      pack.name, seen[r.doc_id].name, r.path.name, r.doc_id, r.path.name)
            continue
        seen[r.doc_id] = r.path
        kept.append(r)
    return kept


def decode_document(raw: bytes, *, name: str, max_bytes: int) -> str:
    """Bytes to text, or a DocumentError that says exactly what is wrong with this file."""
    if len(raw) > max_bytes:
        raise DocumentError(f"{name}: {len(raw):,} bytes exceeds the limit of {max_bytes:,} bytes")
    if not raw.strip():
        raise DocumentError(f"{name}: document is empty")
    if b"\x00" in raw[:65536]:
        raise DocumentError(f"{name}: looks binary (NUL bytes); only UTF-8 text is accepted")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"{name}: not valid UTF-8 at byte {exc.start}") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n")


def load_document(pack: DomainPack, partition_key: str, *, max_bytes: int) -> SourceDocument:
    """Read the document version a partition names; fail clearly if the file changed since."""
    doc_id, version = split_partition_key(partition_key)
    matches = [p for p in pack.corpus_dir.glob(pack.manifest.document_glob) if doc_id_for(p) == doc_id]
    if not matches:
        raise DocumentError(f"{partition_key}: document {doc_id!r} no longer exists in {pack.entry.corpus}")
    path = matches[0]
    size = path.stat().st_size
    if size > max_bytes:
        raise DocumentError(f"{path.name}: {size:,} bytes exceeds the limit of {max_bytes:,} bytes")
    raw = path.read_bytes()
    actual = hashlib.sha256(raw).hexdigest()[:VERSION_CHARS]
    if actual != version:
        raise DocumentError(
            f"{partition_key}: superseded, the file now has version {actual}; its content is no longer available"
        )
    text = decode_document(raw, name=path.name, max_bytes=max_bytes)
    title, collection, language = pack.describe_document(doc_id, text)
    source = path.relative_to(pack.root) if path.is_relative_to(pack.root) else path
    return SourceDocument(pack=pack.name, doc_id=doc_id, version=version, title=title, text=text, collection=collection,
                          language=language, source_path=str(source))
