"""Domain pack contract and the generic loader.

A pack brings the domain knowledge (how to chunk, which references exist and how to normalize
them, which relationship types the LLM may emit); the engine stays generic. Packs are enabled
by config alone: an entry in engine.yaml names the module (inside the pack's ``path``) and the
factory (a function or DomainPack class defined there). An installed distribution may publish the
same ``module:factory`` under the ``rag_engine.packs`` entry point group (its module may then live
outside ``path``); one publishing another target under the pack's name is refused (PackShadowed),
explicit config is never silently replaced. Anything that goes wrong while a pack is imported or
built is a PackError for that pack alone: ``load_packs`` leaves it out and the others load.

Reference keys are opaque strings chosen by the pack, in one namespace per pack: a chunk
*answers to* keys (``ChunkRecord.keys``) and *cites* keys (``ReferenceRecord.normalized``); a
citation resolves to the chunks answering to the same key. A pack whose documents are separate
instruments (rulebooks that each have a "Rule 3.8") scopes its keys by instrument, e.g.
``cobs:3.8``: an internal reference ("Rule 4.5") is scoped to the citing chunk's own document,
an external one ("GEN 3.3.31") to the instrument it names. The question side goes through
``DomainPack.query_references``, which sees no citing document: a number the question does not
qualify is emitted unscoped (e.g. ``3.8``), and the engine treats a key answered by chunks of
more than one document as ambiguous: never an exact hit, only a bounded boost.

A document may *own* some of the keys its chunks answer to (``DomainPack.owned_keys``): keys that
name the document itself, such as a knowledge base document's front-matter id ``POL-012``. An
owned key belongs to one document of the pack: the engine rejects a later document whose chunks
answer to it (the one already holding it in the graph wins; among new documents, the first in
doc id order), so a public page cannot take over an internal policy's id and its citations.
Keys are shared by default: a rule number answered in many instruments is owned by none.

Local ids (the part after ``#`` in chunk ids and anchors) keep letters, digits and ``._-()~``;
every other character is percent-encoded (UTF-8) by ``encode_local_id``, so a pack may use the
source's own numbering ("9.3.1B Guidance 5", "Part 4/Schedule 1") as local id.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import json
import re
import sys
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, cast

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rag_engine import yaml_safe
from rag_engine.config import EngineConfig, under_root
from rag_engine.config import PackEntry as PackEntry  # re-exported: packs may import only rag_engine.packs
from rag_engine.errors import PackError as PackError  # re-exported: packs may import only rag_engine.packs
from rag_engine.errors import PackShadowed
from rag_engine.text.controls import strip_controls

ENTRY_POINT_GROUP = "rag_engine.packs"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PackManifest(_Frozen):
    """What a pack declares about itself; every field feeds asset code versions."""

    name: str
    domain: str
    version: str
    rules_version: str
    normalizer_version: str
    reference_types: tuple[str, ...]
    languages: tuple[str, ...]
    collections: tuple[str, ...]
    default_collection: str
    relationship_types: tuple[str, ...]
    entity_types: tuple[str, ...]
    aliases: dict[str, tuple[str, ...]] = {}
    max_chunk_chars: int = Field(2000, ge=200)
    min_chunk_words: int = Field(0, ge=0)
    """Chunks with fewer words (headings, bare numbers) are kept as citation anchors and exact
    reference targets but are not retrieval-eligible by themselves (lexical and dense legs)."""
    document_glob: str = "*.md"


class SourceDocument(_Frozen):
    pack: str
    """Graph keys are pack-scoped: two packs may both have a document called 'overview'."""
    doc_id: str
    version: str
    title: str
    text: str
    collection: str
    language: str
    source_path: str


class ChunkRecord(_Frozen):
    chunk_id: str
    """Unique per pack and document version: ``<pack>:<doc_id>--<version>#<local>``."""
    anchor: str
    """Stable across versions: ``<doc_id>#<local>``; golden sets and citations of intent use it."""
    doc_id: str
    doc_version: str
    ordinal: int
    heading: str
    text: str
    collection: str
    language: str
    content_hash: str
    keys: tuple[str, ...] = ()
    """Normalized reference keys this chunk answers to (e.g. ``article:23(1)``)."""


class ReferenceRecord(_Frozen):
    source_chunk_id: str
    ref_type: str
    raw: str
    normalized: str
    start: int
    end: int


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


LOCAL_ID_SAFE = "._-()~"
_LOCAL_ID_OK = re.compile(r"^[A-Za-z0-9._\-()~%]+$")


def encode_local_id(local: str) -> str:
    """A pack's own numbering as a local id: letters, digits and ``._-()~`` are kept, anything
    else (spaces, slashes, '#', brackets other than parentheses, non-ASCII) is percent-encoded
    as UTF-8. Idempotent on ids that are already encoded."""
    if not local or not local.strip():
        raise PackError("a chunk's local id must not be empty")
    if _LOCAL_ID_OK.match(local) and "%" not in local:
        return local
    return urllib.parse.quote(urllib.parse.unquote(local), safe=LOCAL_ID_SAFE)


def make_chunk(
    doc: SourceDocument, ordinal: int, local: str, heading: str, text: str, keys: tuple[str, ...] = ()
) -> ChunkRecord:
    """Build a chunk with the id conventions every pack shares (local ids encoded). Control
    characters are removed from the text and heading (a JSON ``\u0000`` put a NUL into a chunk)."""
    local = encode_local_id(local)
    text = strip_controls(text)
    heading = strip_controls(heading).replace("\n", " ")  # one line: the block header it is printed in
    return ChunkRecord(
        chunk_id=f"{doc.pack}:{doc.doc_id}--{doc.version}#{local}",
        anchor=f"{doc.doc_id}#{local}",
        doc_id=doc.doc_id,
        doc_version=doc.version,
        ordinal=ordinal,
        heading=heading,
        text=text,
        collection=doc.collection,
        language=doc.language,
        content_hash=content_hash(text)[:16],
        keys=keys,
    )


def load_yaml(text: str, *, source: str, first_line: int = 1, what: str = "YAML text") -> Any:
    """YAML for a pack's own use (front matter): safe, a repeated key refused, any problem a PackError
    naming the source, so a pack needs no YAML library and no engine module beyond this one."""
    try:
        return yaml_safe.load(text, source=source, first_line=first_line)
    except yaml.YAMLError as exc:
        raise PackError(f"{source}: {what} is not valid YAML: {exc}") from None


class DomainPack(ABC):
    """The contract. Implementations must be deterministic: same input, same output."""

    def __init__(self, entry: PackEntry, manifest: PackManifest, root: Path):
        self.entry = entry
        self.manifest = manifest
        self.root = root

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def corpus_dir(self) -> Path:
        return self.root / self.entry.corpus

    @property
    def fixtures_dir(self) -> Path:
        return self.root / self.entry.fixtures

    def describe_document(self, doc_id: str, text: str) -> tuple[str, str, str]:
        """(title, collection, language) of a document; override for richer metadata."""
        first = next((ln.lstrip("# ").strip() for ln in text.splitlines() if ln.strip()), doc_id)
        return first[:200], self.manifest.default_collection, self.manifest.languages[0]

    @abstractmethod
    def chunk(self, doc: SourceDocument) -> list[ChunkRecord]:
        """Split a document into chunks with stable local ids and the reference keys they answer to."""

    @abstractmethod
    def extract_references(self, chunk: ChunkRecord) -> list[ReferenceRecord]:
        """Deterministic references found in a chunk, normalized to keys other chunks may answer to."""

    def owned_keys(self, doc: SourceDocument) -> tuple[str, ...]:
        """Keys this document declares as its own identity (its id, not a number it shares with
        other documents): no other document of the pack may answer to them. Each must be a key
        one of the document's chunks answers to. The default owns none: keys are shared."""
        return ()

    def question_chunk(self, text: str) -> ChunkRecord:
        """A question as a chunk of no document (``doc_id`` empty), for the pack's reference parser."""
        return ChunkRecord(
            chunk_id="query",
            anchor="query",
            doc_id="",
            doc_version="",
            ordinal=0,
            heading="",
            text=text,
            collection="",
            language=self.manifest.languages[0],
            content_hash="",
        )

    def query_references(self, text: str) -> list[ReferenceRecord]:
        """References named in a question, normalized to the same keys chunks answer to.

        The default parses the question like a chunk of no document (``doc_id`` empty), which is
        right for single-instrument packs. A multi-instrument pack overrides it: a reference that
        names its instrument ("COBS Rule 17.5") maps to the scoped key; an unqualified number maps
        to an unscoped key, which the engine treats as ambiguous when several documents answer it.
        """
        return self.extract_references(self.question_chunk(text))

    def documents_named(self, text: str) -> list[str]:
        """Doc ids of the documents a question names as a whole ("under the AML Rulebook", "FSMR"),
        so retrieval can prefer their passages (a bounded boost, never a filter). The default
        names none; a multi-instrument pack matches its instruments' codes and titles."""
        return []

    def rules_fingerprint(self) -> str:
        """Hash of everything that changes extraction output: the manifest and the pack module's
        whole source (rules usually live in module-level patterns, not only in the class)."""
        payload = self.manifest.model_dump(mode="json")
        payload["rules_source"] = inspect.getsource(sys.modules[type(self).__module__])
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def require_versions(
    entry: PackEntry, manifest: PackManifest, *, rules: frozenset[str], normalizers: frozenset[str]
) -> None:
    """A pack factory refuses a manifest asking for rule/normalizer versions its code does not implement."""
    for label, asked, known in (
        ("rules_version", manifest.rules_version, rules),
        ("normalizer_version", manifest.normalizer_version, normalizers),
    ):
        if asked not in known:
            raise PackError(f"pack {entry.name!r}: {label} {asked!r} not supported (known: {sorted(known)})")


def _load_manifest(entry: PackEntry, root: Path) -> PackManifest:
    path = root / entry.manifest
    if not path.is_file():
        raise PackError(f"pack {entry.name!r}: manifest not found: {entry.manifest}")
    try:
        manifest = PackManifest.model_validate(yaml_safe.load_file(path))
    except (yaml.YAMLError, ValidationError) as exc:
        raise PackError(f"pack {entry.name!r}: invalid manifest {entry.manifest}: {exc}") from None
    mismatches = [
        f"{field}: config {getattr(entry, field)!r} != manifest {getattr(manifest, field)!r}"
        for field in ("domain", "version", "reference_types", "languages", "collections")
        if getattr(entry, field) != getattr(manifest, field)
    ]
    if mismatches:
        raise PackError(f"pack {entry.name!r}: config and manifest disagree: " + "; ".join(mismatches))
    return manifest


def _installed() -> list[EntryPoint]:
    """The installed entry points of the pack group (a scan of every installed distribution's
    metadata: 5-10 ms, so ``load_packs`` scans once for all its packs)."""
    return list(entry_points(group=ENTRY_POINT_GROUP))


def _published(entry: PackEntry, installed: list[EntryPoint]) -> list[EntryPoint]:
    """Installed entry points that publish a pack under this entry's name."""
    return [ep for ep in installed if ep.name == entry.name]


def _publisher(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"distribution {dist.name!r}" if dist is not None else "an installed distribution"


def _shadowing(published: list[EntryPoint], entry: PackEntry) -> list[str]:
    """Of ``published``, the entry points whose target is not the configured ``module:factory``,
    each as "<distribution> publishes <name> = <target>"."""
    return [
        f"{_publisher(ep)} publishes {ep.name} = {ep.value}"
        for ep in published
        if (ep.module, ep.attr) != (entry.module, entry.factory)
    ]


def _require_pack_module(entry: PackEntry, root: Path, published: bool) -> None:
    """``module:`` must name a module inside the pack's ``path`` (or one an installed distribution
    publishes as this pack): located without running it, so ``module: json`` imports nothing."""
    try:
        spec = importlib.util.find_spec(entry.module)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a parent package failing at import: this pack's alone
        raise PackError(f"pack {entry.name!r}: cannot import {entry.module}: {type(exc).__name__}: {exc}") from None
    if spec is None:
        raise PackError(f"pack {entry.name!r}: cannot import {entry.module}: no module named {entry.module!r}")
    if published:
        return
    pack_dir = under_root(root, entry.path).resolve()
    origin = Path(spec.origin).resolve() if spec.origin and spec.has_location else None
    if origin is None or not origin.is_relative_to(pack_dir):
        where = str(origin) if origin is not None else "no file"
        raise PackError(
            f"pack {entry.name!r}: module {entry.module} ({where}) is not a pack module: it must lie inside "
            f"the pack's path {entry.path}"
        )


def _resolve_factory(entry: PackEntry, root: Path, installed: list[EntryPoint]) -> Callable[..., DomainPack]:
    """The configured ``module:factory`` (explicit config wins). An installed entry point of the
    same name must name the same target: a different one is refused (PackShadowed), never chosen."""
    published = _published(entry, installed)
    shadowing = _shadowing(published, entry)
    if shadowing:
        raise PackShadowed(
            f"pack {entry.name!r}: config names {entry.module}:{entry.factory} but "
            + "; ".join(shadowing)
            + f" (entry point group {ENTRY_POINT_GROUP}); refusing to choose: remove the entry point "
            "or make module/factory agree with it"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    _require_pack_module(entry, root, published=bool(published))
    try:
        module = importlib.import_module(entry.module)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - SyntaxError, RuntimeError, exit(): this pack's alone
        raise PackError(f"pack {entry.name!r}: cannot import {entry.module}: {type(exc).__name__}: {exc}") from None
    factory = getattr(module, entry.factory, None)
    if not callable(factory):
        raise PackError(f"pack {entry.name!r}: {entry.module} has no callable {entry.factory!r}")
    if not (inspect.isfunction(factory) or inspect.isclass(factory)) or factory.__module__ != module.__name__:
        raise PackError(
            f"pack {entry.name!r}: factory {entry.module}:{entry.factory} must be a function or class "
            f"defined in {entry.module}"
        )
    if inspect.isclass(factory) and not issubclass(factory, DomainPack):
        raise PackError(f"pack {entry.name!r}: factory class {entry.factory} is not a DomainPack")
    return cast("Callable[..., DomainPack]", factory)  # a function or DomainPack class of the pack module


def load_pack(entry: PackEntry, root: Path, installed: list[EntryPoint] | None = None) -> DomainPack:
    """One pack, or a PackError naming it: whatever goes wrong while its code is imported or its
    factory runs (any exception, not only ImportError) is this pack's problem, never the caller's.
    ``installed``: the pack group's installed entry points, when the caller scanned them already."""
    manifest = _load_manifest(entry, root)
    factory = _resolve_factory(entry, root, _installed() if installed is None else installed)
    try:
        pack = factory(entry=entry, manifest=manifest, root=root)
    except PackError:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the factory's own failure, whatever its type
        raise PackError(
            f"pack {entry.name!r}: factory {entry.module}:{entry.factory} failed: {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(pack, DomainPack):
        raise PackError(f"pack {entry.name!r}: factory returned {type(pack).__name__}, not a DomainPack")
    return pack


def load_packs(cfg: EngineConfig, root: Path) -> tuple[list[DomainPack], dict[str, PackError]]:
    """Every enabled pack that loads, in config order, and the PackError of each one that does not:
    a broken pack is left out; the others keep working."""
    packs: list[DomainPack] = []
    broken: dict[str, PackError] = {}
    installed = _installed()
    for entry in cfg.enabled_packs:
        try:
            packs.append(load_pack(entry, root, installed))
        except PackError as exc:
            broken[entry.name] = exc
    return packs, broken
