"""Pack lint: what a pack author would otherwise learn from a failed ingest or eval, without a database.

For each enabled pack (or one): the manifest validates and agrees with config and the pack
loads (the loader's own checks; an installed entry point of the pack's name with another target
than the configured module is reported as shadowing); the fixtures path exists; every corpus
document loads and chunks (rejections with their reasons); local ids are unique and use only the
allowed characters; a key a document owns (its id) is answered by no other document; references
parse, and internal ones resolve within the pack; golden queries name anchors that exist
(readable by the query's role), every answerable query has one, and each question has a content
word (``rag_engine.text.terms``, the evidence check's words); relationship and entity types
are declared when extraction is on; the pack module imports nothing of the project but
``rag_engine.packs`` (the dependency rule: packs -> rag_engine.packs); a collection no role can
read is a warning.

A reference type is *internal* when at least one citation of that type resolves within the pack;
types with no resolving citation at all (another regulation, an outside instrument) are external
and not listed. Unresolved internal keys are warnings: sources cite passages they do not contain.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict

from rag_engine import yaml_safe
from rag_engine.config import EngineConfig, PackEntry, under_root
from rag_engine.errors import PackError, PackShadowed, RagError
from rag_engine.ingest.documents import discover, load_document
from rag_engine.packs import LOCAL_ID_SAFE, ChunkRecord, DomainPack, encode_local_id, load_pack
from rag_engine.text.terms import content_stems

Severity = Literal["error", "warning"]

ALLOWED_PACK_IMPORTS = frozenset({"rag_engine.packs", "__future__"})
"""Besides the standard library and the pack's own package: the one engine module a pack may use."""

TEXT_LIMIT_PER_CODE = 10
"""The text output shows at most this many findings of one code per pack (JSON has all)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LintFinding(_Frozen):
    pack: str
    severity: Severity
    code: str
    message: str
    where: str = ""
    """File, anchor, golden query id or module the finding is about ('' for the pack as a whole)."""


class PackLintStats(_Frozen):
    pack: str
    documents: int = 0
    chunks: int = 0
    references: int = 0
    resolved: int = 0
    golden_queries: int = 0


class LintReport(_Frozen):
    packs: tuple[PackLintStats, ...]
    findings: tuple[LintFinding, ...]

    @property
    def errors(self) -> int:
        return sum(f.severity == "error" for f in self.findings)

    @property
    def warnings(self) -> int:
        return sum(f.severity == "warning" for f in self.findings)

    @property
    def exit_code(self) -> int:
        """1 when any error was found, 0 with warnings only (the CLI's check-failed convention)."""
        return 1 if self.errors else 0


class _Collector:
    def __init__(self, pack: str):
        self.pack = pack
        self.findings: list[LintFinding] = []

    def error(self, code: str, message: str, where: str = "") -> None:
        self.findings.append(LintFinding(pack=self.pack, severity="error", code=code, message=message, where=where))

    def warning(self, code: str, message: str, where: str = "") -> None:
        self.findings.append(LintFinding(pack=self.pack, severity="warning", code=code, message=message, where=where))


# -- the pack module's imports --------------------------------------------------------------------


def _module_file(module: str, root: Path) -> Path | None:
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        spec = importlib.util.find_spec(module)
    except (Exception, SystemExit):  # noqa: BLE001 - a parent package failing at import: load_pack reports it
        return None
    return Path(spec.origin) if spec is not None and spec.origin and spec.origin.endswith(".py") else None


def _imported(tree: ast.AST, package: str) -> Iterable[tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: inside the pack's own package
                yield package or ".", node.lineno
            elif node.module == "rag_engine":  # `from rag_engine import packs` is the allowed module
                for alias in node.names:
                    yield f"rag_engine.{alias.name}", node.lineno
            elif node.module:
                yield node.module, node.lineno


def _import_allowed(name: str, package: str) -> bool:
    top = name.split(".")[0]
    if name in ALLOWED_PACK_IMPORTS or name == "." or top in sys.stdlib_module_names:
        return True
    return bool(package) and (name == package or name.startswith(package + "."))


def lint_imports(entry: PackEntry, root: Path, out: _Collector) -> None:
    """The pack module may import the standard library, its own package and ``rag_engine.packs``."""
    path = _module_file(entry.module, root)
    if path is None:
        out.warning("module_source", f"no Python source found for {entry.module}; imports not checked", entry.module)
        return
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as exc:
        out.error("module_syntax", f"{entry.module} does not parse: {exc.msg} (line {exc.lineno})", entry.module)
        return
    package = entry.module.rpartition(".")[0]
    for name, line in _imported(tree, package):
        if not _import_allowed(name, package):
            out.error(
                "forbidden_import",
                f"imports {name}; a pack may import only the standard library, its own package and rag_engine.packs",
                f"{entry.module}:{line}",
            )


# -- corpus, chunks, references -----------------------------------------------------------------


def _chunk_corpus(
    pack: DomainPack, max_bytes: int, out: _Collector
) -> tuple[int, list[ChunkRecord], dict[str, tuple[str, tuple[str, ...]]]]:
    """(documents, chunks, doc id -> (file name, keys the document owns)), in sorted path order."""
    refs = discover(pack, include_rejected=True)
    chunks: list[ChunkRecord] = []
    owned: dict[str, tuple[str, tuple[str, ...]]] = {}
    documents = 0
    for ref in refs:
        where = ref.path.name
        try:
            doc = load_document(pack, ref.partition_key, max_bytes=max_bytes)
            doc_chunks = pack.chunk(doc)
            owned[doc.doc_id] = (where, pack.owned_keys(doc))
        except RagError as exc:
            out.error("document_rejected", str(exc), where)
            continue
        except Exception as exc:  # noqa: BLE001 - a pack's chunker failing is a lint finding, not a lint crash
            out.error("chunker_failed", f"{type(exc).__name__}: {exc}", where)
            continue
        if not doc_chunks:
            out.error("no_chunks", "the pack's chunker returned no chunks", where)
            continue
        documents += 1
        chunks.extend(doc_chunks)
    if not refs:
        out.error(
            "empty_corpus",
            f"no document matches {pack.manifest.document_glob!r} in {pack.entry.corpus}",
            pack.entry.corpus,
        )
    return documents, chunks, owned


def lint_key_ownership(
    chunks: list[ChunkRecord], owned: dict[str, tuple[str, tuple[str, ...]]], out: _Collector
) -> None:
    """A key a document owns (its id) is answered by no other document: ingest would reject the
    later claimant (the first in doc id order keeps the key in a fresh graph), so it is an error."""
    answered: dict[str, set[str]] = defaultdict(set)
    for c in chunks:
        for key in c.keys:
            answered[key].add(c.doc_id)
    for doc_id, (where, keys) in owned.items():
        mine = {k for c in chunks if c.doc_id == doc_id for k in c.keys}
        for key in sorted(set(keys) - mine):
            out.error("owned_key_unanswered", f"the document owns key {key!r} but no chunk of it answers to it", where)
    owner: dict[str, str] = {}
    for doc_id in sorted(owned):
        for key in owned[doc_id][1]:
            owner.setdefault(key, doc_id)
    for key, first in sorted(owner.items()):
        for other in sorted(answered[key] - {first}):
            how = "also owns" if key in owned.get(other, ("", ()))[1] else "answers to"
            out.error(
                "key_conflict",
                f"{other} {how} key {key!r}, which {first} (first in doc id order) owns; ingest rejects {other} "
                f"while {first} holds the key",
                owned.get(other, (other, ()))[0],
            )


def lint_local_ids(chunks: list[ChunkRecord], out: _Collector) -> None:
    """Anchors unique in the pack, local ids already in their encoded form (letters, digits, ``._-()~``
    and percent escapes), ids following the shared conventions."""
    counts = Counter(c.anchor for c in chunks)
    for anchor, n in sorted(counts.items()):
        if n > 1:
            out.error("duplicate_local_id", f"{n} chunks share the anchor {anchor!r}", anchor)
    for c in chunks:
        doc_id, sep, local = c.anchor.partition("#")
        if not sep or doc_id != c.doc_id:
            out.error("bad_anchor", f"anchor {c.anchor!r} is not <doc_id>#<local> of document {c.doc_id!r}", c.anchor)
            continue
        try:
            encoded = encode_local_id(local)
        except PackError as exc:
            out.error("bad_local_id", str(exc), c.anchor)
            continue
        if encoded != local:
            out.error(
                "bad_local_id",
                f"local id {local!r} has characters outside letters, digits and "
                f"{LOCAL_ID_SAFE!r}; encoded it is {encoded!r} (build chunks with make_chunk)",
                c.anchor,
            )
        if not c.chunk_id.endswith(f":{c.doc_id}--{c.doc_version}#{local}"):
            out.error("bad_chunk_id", f"chunk id {c.chunk_id!r} is not <pack>:<doc_id>--<version>#<local>", c.anchor)


def lint_references(pack: DomainPack, chunks: list[ChunkRecord], out: _Collector) -> tuple[int, int]:
    """Every citation parses to a declared reference type and a key; internal ones resolve in the pack."""
    answered = {k for c in chunks for k in c.keys}
    for c in chunks:
        for key in c.keys:
            if not key or not key.strip():
                out.error("bad_key", "a chunk answers to an empty reference key", c.anchor)
    declared = set(pack.manifest.reference_types)
    cited: list[tuple[ChunkRecord, str, str, str]] = []  # (chunk, ref_type, key, raw)
    for c in chunks:
        try:
            refs = pack.extract_references(c)
        except Exception as exc:  # noqa: BLE001 - a pack's extractor failing is a lint finding for that chunk
            out.error("references_failed", f"extract_references raised {type(exc).__name__}: {exc}", c.anchor)
            continue
        for r in refs:
            if r.ref_type not in declared:
                out.error(
                    "undeclared_reference_type",
                    f"reference {r.raw!r} has type {r.ref_type!r}, not one of "
                    f"the manifest's reference_types {sorted(declared)}",
                    c.anchor,
                )
            elif not r.normalized.strip():
                out.error("bad_key", f"reference {r.raw!r} normalizes to an empty key", c.anchor)
            else:
                cited.append((c, r.ref_type, r.normalized, r.raw))
    internal = {t for _, t, key, _ in cited if key in answered}
    unresolved: dict[str, list[tuple[ChunkRecord, str]]] = defaultdict(list)
    for c, ref_type, key, raw in cited:
        if ref_type in internal and key not in answered:
            unresolved[key].append((c, raw))
    for key, sites in sorted(unresolved.items()):
        first, raw = sites[0]
        more = f" and {len(sites) - 1} more" if len(sites) > 1 else ""
        out.warning(
            "unresolved_reference",
            f"key {key!r} ({raw!r}) is cited by {first.anchor}{more}; no chunk of the pack answers to it",
            first.anchor,
        )
    resolved = sum(key in answered for _, _, key, _ in cited)
    return len(cited), resolved


# -- golden queries ----------------------------------------------------------------------------


def _default_role(cfg: EngineConfig, entry: PackEntry) -> str | None:
    """As the eval runner: the first role that may read every collection of the pack."""
    return next((r for r, cols in cfg.roles.items() if set(entry.collections) <= set(cols)), None)


GOLDEN_FILES = ("queries.yaml", "paraphrase.yaml", "heldout.yaml")
"""The golden set, the paraphrase set and the held-out test set of a pack's fixtures path (the
last two are optional)."""


def lint_golden(
    cfg: EngineConfig, entry: PackEntry, root: Path, chunks: list[ChunkRecord] | None, out: _Collector
) -> int:
    fixtures = under_root(root, entry.fixtures)
    if not fixtures.is_dir():
        out.error("fixtures_missing", f"the configured fixtures path {entry.fixtures} does not exist", entry.fixtures)
        return 0
    if not (fixtures / GOLDEN_FILES[0]).is_file():
        out.warning(
            "no_golden",
            "no golden queries (queries.yaml) in the fixtures path: the pack is not evaluated",
            f"{entry.fixtures}/queries.yaml",
        )
        return 0
    return sum(
        _lint_golden_file(cfg, entry, fixtures / name, f"{entry.fixtures}/{name}", chunks, out)
        for name in GOLDEN_FILES
        if (fixtures / name).is_file()
    )


def _lint_golden_file(
    cfg: EngineConfig, entry: PackEntry, path: Path, where: str, chunks: list[ChunkRecord] | None, out: _Collector
) -> int:
    try:
        data: Any = yaml_safe.load_file(path)
    except yaml.YAMLError as exc:
        out.error("golden_invalid", f"not valid YAML: {exc}", where)
        return 0
    if not isinstance(data, dict) or not isinstance(data.get("queries"), list):
        out.error("golden_invalid", "needs 'pack' and a 'queries' list", where)
        return 0
    if data.get("pack") != entry.name:
        out.error("golden_pack", f"golden file names pack {data.get('pack')!r}, not {entry.name!r}", where)
    by_anchor = {c.anchor: c for c in chunks} if chunks is not None else None
    file_role = data.get("role") or _default_role(cfg, entry)
    ids = Counter(q.get("id") for q in data["queries"] if isinstance(q, dict))
    for qid, n in ids.items():
        if n > 1:
            out.error("golden_duplicate_id", f"{n} golden queries share the id {qid!r}", str(qid))
    for i, q in enumerate(data["queries"]):
        if not isinstance(q, dict) or not str(q.get("question") or "").strip():
            out.error("golden_invalid", f"query #{i + 1} needs an id and a question", where)
            continue
        qid = str(q.get("id") or f"#{i + 1}")
        gold = q.get("gold") or []
        if not isinstance(gold, list):
            out.error("golden_invalid", "gold must be a list of anchors", qid)
            continue
        role = q.get("role") or file_role
        if role is not None and role not in cfg.roles:
            out.error("golden_unknown_role", f"role {role!r} is not configured", qid)
        if not gold and not q.get("insufficient_evidence"):
            out.error("golden_no_anchor", "an answerable query (insufficient_evidence false) names no gold anchor", qid)
        if not content_stems(str(q["question"])):
            out.warning(
                "golden_no_content_word",
                "the question has only stopwords and question frame (the text analyzer's evidence profile): "
                "the evidence check passes it by default and no lexical leg can match it",
                qid,
            )
        if by_anchor is None:
            continue
        readable = set(cfg.roles.get(role, ())) if role is not None else None
        for anchor in gold:
            chunk = by_anchor.get(str(anchor))
            if chunk is None:
                out.error("golden_unknown_anchor", f"gold anchor {anchor!r} is no chunk of the corpus", qid)
            elif readable is not None and role in cfg.roles and chunk.collection not in readable:
                out.error(
                    "golden_unreadable",
                    f"gold anchor {anchor!r} is in collection {chunk.collection!r}, which role {role!r} may not read",
                    qid,
                )
    return len(data["queries"])


# -- the whole pack -------------------------------------------------------------------------------


def lint_pack(cfg: EngineConfig, entry: PackEntry, root: Path) -> tuple[PackLintStats, list[LintFinding]]:
    out = _Collector(entry.name)
    lint_imports(entry, root, out)
    if entry.extraction:
        try:
            manifest_types = _manifest_types(entry, root)
        except PackError:
            manifest_types = None  # reported by load_pack below
        if manifest_types is not None:
            for label, declared in zip(("relationship_types", "entity_types"), manifest_types, strict=True):
                if not declared:
                    out.error(
                        "extraction_types", f"extraction is on but the manifest declares no {label}", entry.manifest
                    )
    readable = {c for cols in cfg.roles.values() for c in cols}
    for collection in entry.collections:
        if collection not in readable:
            out.warning(
                "unreadable_collection",
                f"no role can read collection {collection!r}: its chunks are never retrieved",
                collection,
            )
    try:
        pack = load_pack(entry, root)
    except PackShadowed as exc:
        out.error("entry_point_shadow", str(exc), entry.module)
        golden = lint_golden(cfg, entry, root, None, out)
        return PackLintStats(pack=entry.name, golden_queries=golden), out.findings
    except PackError as exc:
        out.error("pack_load", str(exc), entry.manifest)
        golden = lint_golden(cfg, entry, root, None, out)
        return PackLintStats(pack=entry.name, golden_queries=golden), out.findings
    documents, chunks, owned = _chunk_corpus(pack, cfg.max_document_bytes, out)
    lint_local_ids(chunks, out)
    lint_key_ownership(chunks, owned, out)
    references, resolved = lint_references(pack, chunks, out)
    golden = lint_golden(cfg, entry, root, chunks, out)
    stats = PackLintStats(
        pack=entry.name,
        documents=documents,
        chunks=len(chunks),
        references=references,
        resolved=resolved,
        golden_queries=golden,
    )
    return stats, out.findings


def _manifest_types(entry: PackEntry, root: Path) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    path = under_root(root, entry.manifest)
    try:
        data = yaml_safe.load_file(path) if path.is_file() else None
    except yaml.YAMLError:
        return None
    if not isinstance(data, dict):
        return None
    return tuple(data.get("relationship_types") or ()), tuple(data.get("entity_types") or ())


def lint_packs(cfg: EngineConfig, root: Path, pack: str | None = None) -> LintReport:
    """Lint every enabled pack, or the one named (an unknown or disabled name is a PackError: bad input)."""
    entries = cfg.enabled_packs
    if pack is not None:
        entries = tuple(e for e in entries if e.name == pack)
        if not entries:
            raise PackError(f"pack {pack!r} is not enabled; enabled: {sorted(e.name for e in cfg.enabled_packs)}")
    stats: list[PackLintStats] = []
    findings: list[LintFinding] = []
    for entry in entries:
        s, f = lint_pack(cfg, entry, root)
        stats.append(s)
        findings.extend(f)
    return LintReport(packs=tuple(stats), findings=tuple(findings))


def render_text(report: LintReport) -> str:
    """One block per pack: its figures, then findings (at most TEXT_LIMIT_PER_CODE of one code)."""
    lines: list[str] = []
    for s in report.packs:
        mine = [f for f in report.findings if f.pack == s.pack]
        errors = sum(f.severity == "error" for f in mine)
        verdict = "FAIL" if errors else "ok"
        lines.append(
            f"{s.pack}: {verdict} ({errors} errors, {len(mine) - errors} warnings) - {s.documents} documents, "
            f"{s.chunks} chunks, {s.references} references ({s.resolved} resolved), "
            f"{s.golden_queries} golden queries"
        )
        shown: Counter[str] = Counter()
        for f in sorted(mine, key=lambda f: (f.severity != "error", f.code)):
            shown[f.code] += 1
            if shown[f.code] <= TEXT_LIMIT_PER_CODE:
                where = f" [{f.where}]" if f.where else ""
                lines.append(f"  {f.severity:<7} {f.code}{where}: {f.message}")
        for code, n in sorted(shown.items()):
            if n > TEXT_LIMIT_PER_CODE:
                lines.append(f"  ... {n - TEXT_LIMIT_PER_CODE} more {code} (--json lists all)")
    lines.append(f"pack lint: {report.errors} errors, {report.warnings} warnings in {len(report.packs)} packs")
    return "\n".join(lines)
