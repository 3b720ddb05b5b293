"""Company X knowledge base pack: policies, runbooks and tickets written as Markdown.

Document shape::

    ---
    id: POL-012                 # the document's own id; a key of its first chunk, owned by the
                                # document (another document claiming it is rejected)
    title: Access Control ...   # optional, else the '# ' heading
    collection: kb_internal     # decides who may read it; must be one of the manifest collections
    ---
    # Title
    optional introduction
    ## Section                  # one chunk per section, local id = slug of the heading

Chunking rule (rules_version "1"): the introduction (text between the title and the first
``##``) is chunk ``intro``; each ``##`` section is one chunk whose local id is the slug of its
heading (``## Approval limits`` -> ``approval-limits``). Sections longer than
manifest.max_chunk_chars are split at blank lines, then lines, then sentences; later parts get
``-2``, ``-3``. Colliding local ids get a numeric suffix in document order.

Reference normalizer (normalizer_version "1"): ``POL-12``/``POL-012`` -> ``policy:pol-012``
(three digits), ``RB-3`` -> ``runbook:rb-3``, ``TCK-1234`` -> ``ticket:tck-1234`` (four digits). A chunk never
references a key it answers to itself.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Any

from rag_engine.packs import (
    ChunkRecord,
    DomainPack,
    PackEntry,
    PackError,
    PackManifest,
    ReferenceRecord,
    SourceDocument,
    load_yaml,
    make_chunk,
    require_versions,
)

SUPPORTED_RULES_VERSIONS = frozenset({"1"})
SUPPORTED_NORMALIZER_VERSIONS = frozenset({"1"})
DASH = "\u2014"

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.S)
_ID_REF = re.compile(r"\b(POL|RB|TCK)-(\d{1,6})\b")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def normalize_id(prefix: str, number: str) -> tuple[str, str]:
    """(ref_type, key) of an id such as ('POL', '12')."""
    prefix = prefix.upper()
    n = int(number)
    if prefix == "POL":
        return "policy", f"policy:pol-{n:03d}"
    if prefix == "RB":
        return "runbook", f"runbook:rb-{n}"
    if prefix == "TCK":
        return "ticket", f"ticket:tck-{n:04d}"
    raise ValueError(f"unknown id prefix {prefix!r}")


def slugify(text: str) -> str:
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-") or "section"


_SCALAR_FIELDS = ("id", "title", "collection", "language")
_MAX_FIELD_CHARS = 1000


def split_front_matter(doc_id: str, text: str) -> tuple[dict[str, Any], str, int]:
    """(front matter, body, number of lines the front matter took)."""
    m = _FRONT_MATTER.match(text)
    if not m:
        return {}, text, 0
    meta = load_yaml(m.group(1), source=doc_id, first_line=2, what="front matter") or {}
    if not isinstance(meta, dict):
        raise PackError(f"{doc_id}: front matter must be a mapping")
    for field in _SCALAR_FIELDS:  # checked before use: a list or mapping here is never a title or id
        value = meta.get(field)
        if value is not None and (not isinstance(value, str | int | float) or isinstance(value, bool)):
            raise PackError(f"{doc_id}: front matter {field!r} must be text, not {type(value).__name__}")
        if isinstance(value, str) and len(value) > _MAX_FIELD_CHARS:
            raise PackError(f"{doc_id}: front matter {field!r} is longer than {_MAX_FIELD_CHARS} characters")
    return meta, text[m.end() :], m.group(0).count("\n")


def _split_long(body: str, limit: int) -> list[str]:
    """Parts of at most `limit` characters, broken at blank lines, then lines, then sentences."""
    if len(body) <= limit:
        return [body]
    pieces: list[tuple[str, str]] = []  # (separator before the piece, piece)
    for b, block in enumerate(re.split(r"\n\s*\n", body)):
        for ln, line in enumerate(block.splitlines()):
            sep = "\n" if ln else ("\n\n" if b else "")
            for sentence in [line] if len(line) <= limit else _SENTENCE_END.split(line):
                while len(sentence) > limit:
                    cut = sentence.rfind(" ", 0, limit)
                    cut = cut if cut > 0 else limit
                    pieces.append((sep, sentence[:cut]))
                    sep, sentence = " ", sentence[cut:].lstrip()
                pieces.append((sep, sentence))
                sep = " "
    parts: list[str] = []
    current = ""
    for sep, piece in pieces:
        if current and len(current) + len(sep) + len(piece) > limit:
            parts.append(current)
            current = piece
        else:
            current = f"{current}{sep}{piece}" if current else piece
    if current:
        parts.append(current)
    return parts


class CompanyKbPack(DomainPack):
    """Policies, runbooks and tickets; the front matter decides the collection."""

    def describe_document(self, doc_id: str, text: str) -> tuple[str, str, str]:
        meta, body, _ = split_front_matter(doc_id, text)
        collection = meta.get("collection", self.manifest.default_collection)
        if collection not in self.manifest.collections:
            raise PackError(f"{doc_id}: collection {collection!r} is not one of {list(self.manifest.collections)}")
        language = meta.get("language", self.manifest.languages[0])
        if language not in self.manifest.languages:
            raise PackError(f"{doc_id}: language {language!r} is not one of {list(self.manifest.languages)}")
        title = meta.get("title") or next((ln[2:].strip() for ln in body.splitlines() if ln.startswith("# ")), doc_id)
        return str(title)[:200], collection, language

    def document_key(self, doc_id: str, meta: dict[str, Any]) -> str | None:
        raw = meta.get("id")
        if raw is None:
            return None
        m = _ID_REF.fullmatch(str(raw).strip())
        if not m:
            raise PackError(f"{doc_id}: front matter id {raw!r} is not POL-n, RB-n or TCK-n")
        return normalize_id(m.group(1), m.group(2))[1]

    def owned_keys(self, doc: SourceDocument) -> tuple[str, ...]:
        """The front-matter id names the document: no other document may answer to it."""
        key = self.document_key(doc.doc_id, split_front_matter(doc.doc_id, doc.text)[0])
        return (key,) if key else ()

    def chunk(self, doc: SourceDocument) -> list[ChunkRecord]:
        meta, body, offset = split_front_matter(doc.doc_id, doc.text)
        doc_key = self.document_key(doc.doc_id, meta)
        title = doc.title
        sections: list[tuple[str, str, list[str]]] = []  # (local base, heading, lines)
        seen_title = False
        for lineno, line in enumerate(body.splitlines(), offset + 1):
            if line.startswith("# "):
                if seen_title or sections:
                    raise PackError(f"{doc.doc_id}:{lineno}: a second '# ' title")
                seen_title = True
                continue
            if line.startswith("## "):
                name = line[3:].strip()
                sections.append((slugify(name), f"{title} {DASH} {name}", []))
                continue
            if not sections:
                sections.append(("intro", title, []))
            sections[-1][2].append(line)
        used: set[str] = set()
        chunks: list[ChunkRecord] = []

        def unique(local: str) -> str:
            candidate, n = local, 1
            while candidate in used:
                n += 1
                candidate = f"{local}-{n}"
            used.add(candidate)
            return candidate

        for base, heading, lines in sections:
            text = "\n".join(lines).strip()
            if not text:
                continue
            parts = _split_long(text, self.manifest.max_chunk_chars)
            base = unique(base)
            for i, part in enumerate(parts, 1):
                local = base if i == 1 else unique(f"{base}-{i}")
                keys = (doc_key,) if doc_key and not chunks else ()
                chunks.append(
                    make_chunk(
                        doc,
                        len(chunks),
                        local,
                        heading if len(parts) == 1 else f"{heading} (part {i} of {len(parts)})",
                        part,
                        keys,
                    )
                )
        if not chunks:
            raise PackError(f"{doc.doc_id}: document has no text")
        return chunks

    def extract_references(self, chunk: ChunkRecord) -> list[ReferenceRecord]:
        allowed = set(self.manifest.reference_types)
        own = set(chunk.keys)
        out: list[ReferenceRecord] = []
        seen: set[tuple[str, int]] = set()
        for m in _ID_REF.finditer(chunk.text):
            ref_type, key = normalize_id(m.group(1), m.group(2))
            if ref_type not in allowed or key in own or (key, m.start()) in seen:
                continue
            seen.add((key, m.start()))
            out.append(
                ReferenceRecord(
                    source_chunk_id=chunk.chunk_id,
                    ref_type=ref_type,
                    raw=m.group(0),
                    normalized=key,
                    start=m.start(),
                    end=m.end(),
                )
            )
        return out


def build_pack(entry: PackEntry, manifest: PackManifest, root: Path) -> CompanyKbPack:
    require_versions(entry, manifest, rules=SUPPORTED_RULES_VERSIONS, normalizers=SUPPORTED_NORMALIZER_VERSIONS)
    return CompanyKbPack(entry, manifest, root)
