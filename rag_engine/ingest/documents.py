"""Source documents on disk: discovery by content hash, and strict per-document validation.

A document version is the content hash of the file's bytes, so an unchanged file yields the
same partition key and adds nothing, and any edit yields a new version that supersedes the old.
Validation errors are per document (DocumentError) so one bad file never stops the others.

What counts as a document of the corpus:
- hidden files and files under hidden directories (``.git``, editor backups) are skipped;
- a link resolving outside the corpus root is rejected and never read (a link to a system file
  must not be ingested);
- two files whose names map to one doc id: the first in sorted path order is the document, the
  other is rejected and says so (rename it).
Rejected files still get a partition key (``include_rejected``) so the run records why.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from rag_engine.errors import DocumentError, PackError
from rag_engine.packs import DomainPack, SourceDocument
from rag_engine.store.partition_keys import MAX_DOC_ID_CHARS, PARTITION_SEP, VERSION_CHARS
from rag_engine.store.partition_keys import check as check_partition_key
from rag_engine.text.controls import strip_controls

log = logging.getLogger(__name__)
_DOC_ID_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


DOC_ID_HASH_CHARS = 8


@dataclass(frozen=True)
class DocumentVersionRef:
    doc_id: str
    version: str
    path: Path
    problem: str | None = None
    """Why this file is not a document (a link out of the corpus, a doc id taken by another file)."""

    @property
    def partition_key(self) -> str:
        return f"{self.doc_id}{PARTITION_SEP}{self.version}"


def doc_id_for(path: Path) -> str:
    """A stable id from the file name: ASCII letters, digits, ``_.-``; accents are transliterated.

    A name with characters that have no ASCII form (Cyrillic, CJK, ...) gets a short hash of the
    whole name appended, so "отчёт-1.md" and "счёт-1.md" stay two documents (they would both be
    "1" otherwise), and a name with nothing left is ``doc_<hash>``, never a shared fallback.
    """
    stem = unicodedata.normalize("NFC", path.stem)
    if stem.isascii():  # unchanged for ASCII names: existing doc ids never move
        slug = _DOC_ID_BAD.sub("_", stem).strip("_").lstrip("._")  # never a leading dot: a key, not a hidden name
        lossy = False
    else:
        parts, lossy = [], False
        for ch in stem:
            ascii_ = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode()
            parts.append(ascii_ or " ")
            lossy = lossy or (not ascii_ and unicodedata.category(ch)[0] in "LN")
        slug = _DOC_ID_BAD.sub("_", "".join(parts)).strip("_.-")
    if slug and not lossy and len(slug) <= MAX_DOC_ID_CHARS:
        return slug
    digest = hashlib.sha256(stem.encode("utf-8")).hexdigest()[:DOC_ID_HASH_CHARS]
    slug = slug[: MAX_DOC_ID_CHARS - DOC_ID_HASH_CHARS - 1]  # an expanding transliteration stays a valid key
    return f"{slug}_{digest}" if slug else f"doc_{digest}"


def file_version(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:VERSION_CHARS]


def split_partition_key(key: str) -> tuple[str, str]:
    """``(doc_id, version)``; BadPartitionKey for anything ``doc_id_for`` and ``file_version`` cannot make."""
    return check_partition_key(key)


def _candidates(pack: DomainPack) -> list[Path]:
    """Files the document glob matches, in sorted path order, hidden ones left out."""
    corpus = pack.corpus_dir
    if not corpus.is_dir():
        return []
    out = []
    for p in sorted(corpus.glob(pack.manifest.document_glob), key=lambda q: q.as_posix()):
        if any(part.startswith(".") for part in p.relative_to(corpus).parts):
            continue  # hidden: VCS metadata, editor swap and backup files
        if p.is_symlink() or p.is_file():
            out.append(p)
    return out


def _link_problem(path: Path, corpus: Path) -> str | None:
    """Why a file may not be read as a document of this corpus (links only), or None."""
    if not path.is_symlink() and path.resolve().is_relative_to(corpus.resolve()):
        return None
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return f"{path.name}: a broken or looping link"
    if not target.is_relative_to(corpus.resolve()):
        return f"{path.name}: resolves outside the corpus root; links out of the corpus are not followed"
    if not target.is_file():
        return f"{path.name}: a link to something that is not a file"
    return None


def _scan(pack: DomainPack, only_doc_id: str | None = None) -> list[DocumentVersionRef]:
    corpus = pack.corpus_dir
    refs: list[DocumentVersionRef] = []
    owner: dict[str, Path] = {}
    for p in _candidates(pack):
        doc_id = doc_id_for(p)
        if only_doc_id is not None and doc_id != only_doc_id:
            continue
        problem = _link_problem(p, corpus)
        if problem is not None:  # never read: the version names where the link points, not its bytes
            version = hashlib.sha256(os.path.realpath(p).encode()).hexdigest()[:VERSION_CHARS]
        else:
            version = file_version(p)
            if doc_id in owner:
                problem = (
                    f"{p.name}: maps to document id {doc_id!r}, which {owner[doc_id].name} (first in sorted "
                    f"order) already is; rename {p.name} to ingest it"
                )
            else:
                owner[doc_id] = p
        refs.append(DocumentVersionRef(doc_id, version, p, problem))
    return refs


def discover(pack: DomainPack, *, include_rejected: bool = False) -> list[DocumentVersionRef]:
    """Every document of a pack's corpus with its current version, in sorted path order.

    With ``include_rejected`` the files that are not documents (links out of the corpus, a doc id
    another file already is) come too, each with its ``problem``: a run gives them a partition
    and records the rejection (``load_document`` raises it) instead of dropping them silently."""
    refs = _scan(pack)
    seen: set[str] = set()
    out = []
    for r in refs:
        if r.problem is not None and not include_rejected:
            log.error("pack %s: %s", pack.name, r.problem)
            continue
        if r.partition_key in seen:  # identical bytes under two names: one partition
            log.error("pack %s: %s", pack.name, r.problem)
            continue
        seen.add(r.partition_key)
        out.append(r)
    return out


def decode_document(raw: bytes, *, name: str, max_bytes: int) -> str:
    """Bytes to text, or a DocumentError that says exactly what is wrong with this file."""
    if len(raw) > max_bytes:
        raise DocumentError(f"{name}: {len(raw):,} bytes exceeds the limit of {max_bytes:,} bytes")
    if not raw.strip():
        raise DocumentError(f"{name}: document is empty")
    if b"\x00" in raw:  # anywhere: a text head does not make a binary tail text
        raise DocumentError(f"{name}: looks binary (NUL bytes); only UTF-8 text is accepted")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"{name}: not valid UTF-8 at byte {exc.start}") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n")


def describe(pack: DomainPack, doc_id: str, text: str) -> tuple[str, str, str]:
    """The pack's (title, collection, language) of a document; whatever the pack raises (a
    RecursionError on a deep header, a ValueError on a 5,000-digit number) rejects this document
    alone, recorded, instead of failing the partition on every run."""
    try:
        title, collection, language = pack.describe_document(doc_id, text)
    except (DocumentError, PackError):
        raise
    except Exception as exc:  # noqa: BLE001 - a pack's bug or a hostile document: this document's problem
        problem = str(exc).splitlines()[0][:300] if str(exc) else ""
        raise PackError(f"{doc_id}: the pack could not read this document: {type(exc).__name__}: {problem}") from None
    if not all(isinstance(v, str) for v in (title, collection, language)):
        raise PackError(f"{doc_id}: the pack described this document with values that are not text")
    return strip_controls(title).replace("\n", " "), collection, language


def still_in_corpus(pack: DomainPack, doc: SourceDocument) -> str | None:
    """Why a version read earlier in a run may no longer be written (its file was removed or
    changed since), or None. Checked just before a version is activated, so a run that read a
    file a concurrent run then withdrew does not bring it back."""
    path = Path(doc.source_path)
    path = path if path.is_absolute() else pack.root / path
    try:
        if not path.is_file():
            return f"{doc.doc_id}: the file was removed from the corpus while the run was in progress"
        if file_version(path) != doc.version:
            return f"{doc.doc_id}--{doc.version}: superseded while the run was in progress (the file changed)"
    except OSError as exc:
        return f"{doc.doc_id}: the file cannot be read any more ({type(exc).__name__})"
    return None


def load_document(pack: DomainPack, partition_key: str, *, max_bytes: int) -> SourceDocument:
    """Read the document version a partition names; fail clearly if the file changed since."""
    doc_id, version = split_partition_key(partition_key)
    refs = _scan(pack, only_doc_id=doc_id)
    if not refs:
        raise DocumentError(f"{partition_key}: document {doc_id!r} no longer exists in {pack.entry.corpus}")
    ref = next((r for r in refs if r.version == version), None)
    if ref is None:
        current = next((r.version for r in refs if r.problem is None), refs[0].version)
        raise DocumentError(
            f"{partition_key}: superseded, the file now has version {current}; its content is no longer available"
        )
    if ref.problem is not None:
        raise DocumentError(f"{partition_key}: {ref.problem}")
    path = ref.path
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
    title, collection, language = describe(pack, doc_id, text)
    source = path.relative_to(pack.root) if path.is_relative_to(pack.root) else path
    return SourceDocument(
        pack=pack.name,
        doc_id=doc_id,
        version=version,
        title=title,
        text=text,
        collection=collection,
        language=language,
        source_path=str(source),
    )
