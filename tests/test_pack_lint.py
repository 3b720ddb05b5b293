"""Pack lint (`rag packs lint`): the shipped packs pass, broken throwaway packs are caught. No services."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from rag_engine.config import EngineConfig, PackEntry
from rag_engine.engine import Engine
from rag_engine.errors import PackError
from rag_engine.ops.pack_lint import LintReport, lint_packs, render_text
from tests.support.cli import rag
from tests.support.packs import POLICY, RUNBOOK, temp_pack

ROOT = Path(__file__).resolve().parents[1]

TINY_PACK = '''"""Throwaway pack: one chunk per '## ' section, the heading itself as local id (no de-duplication)."""
{extra}
import re

from rag_engine.packs import DomainPack, make_chunk


class TinyPack(DomainPack):
    def chunk(self, doc):
        chunks = []
        for part in re.split(r"^## ", doc.text, flags=re.M)[1:]:
            heading, _, body = part.partition("\\n")
            chunks.append(make_chunk(doc, len(chunks), heading.strip(), heading.strip(), body.strip()))
        return chunks

    def extract_references(self, chunk):
        return []


def build_pack(entry, manifest, root):
    return TinyPack(entry, manifest, root)
'''


def _golden(path: Path, pack: str, queries: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "queries.yaml").write_text(f"version: 1\npack: {pack}\nqueries:\n{queries}", encoding="utf-8")
    return path


def _only(cfg: EngineConfig, entry: PackEntry) -> EngineConfig:
    return cfg.model_copy(update={"packs": (entry,)})


def _codes(report: LintReport, severity: str = "error") -> set[str]:
    return {f.code for f in report.findings if f.severity == severity}


@pytest.fixture(scope="module")
def shipped(base_config: EngineConfig) -> LintReport:
    return lint_packs(base_config, ROOT)


def test_shipped_packs_pass(shipped: LintReport, base_config: EngineConfig) -> None:
    assert [s.pack for s in shipped.packs] == [p.name for p in base_config.enabled_packs]
    assert shipped.errors == 0, render_text(shipped)
    assert shipped.exit_code == 0
    assert _codes(shipped, "warning") <= {"unresolved_reference"}
    for stats in shipped.packs:
        assert stats.documents > 0 and stats.chunks >= stats.documents and stats.golden_queries > 0
    assert render_text(shipped).endswith(f"0 errors, {shipped.warnings} warnings in 3 packs")


def test_unknown_pack_is_bad_input(base_config: EngineConfig) -> None:
    with pytest.raises(PackError, match="not enabled"):
        lint_packs(base_config, ROOT, pack="nope")


def test_golden_anchor_that_does_not_exist(base_config: EngineConfig, tmp_path: Path) -> None:
    name = f"lint_{uuid.uuid4().hex[:8]}"
    dangling = POLICY.replace("id: POL-900", "id: POL-901").replace("See RB-77", "See RB-78")
    pack = temp_pack(
        Engine(base_config, ROOT),
        name,
        tmp_path / "corpus",
        {"pol-900.md": POLICY, "rb-77.md": RUNBOOK, "pol-901.md": dangling},
    )
    fixtures = _golden(
        tmp_path / "golden",
        name,
        """\
  - {id: q1, question: "How fast must a lost laptop be reported?", gold: [pol-900#lost-devices], role: employee}
  - {id: q2, question: "Where is the moon policy?", gold: [pol-900#the-moon], role: employee}
  - {id: q3, question: "Is the laptop encrypted?", gold: [], role: employee, insufficient_evidence: false}
  - {id: q4, question: "What is the tax rate?", gold: [], role: employee, insufficient_evidence: true}
  - {id: q5, question: "Lost laptops?", gold: [pol-900#lost-devices], role: public}
""",
    )
    entry = pack.entry.model_copy(update={"fixtures": str(fixtures)})
    report = lint_packs(_only(base_config, entry), ROOT)
    errors = {(f.code, f.where) for f in report.findings if f.severity == "error"}
    assert errors == {("golden_unknown_anchor", "q2"), ("golden_no_anchor", "q3"), ("golden_unreadable", "q5")}
    assert report.exit_code == 1
    unresolved = [f for f in report.findings if f.code == "unresolved_reference"]
    assert [(f.severity, f.where) for f in unresolved] == [("warning", "pol-901#scope")]
    assert "runbook:rb-78" in unresolved[0].message
    assert report.packs[0].documents == 3 and report.packs[0].golden_queries == 5
    assert "FAIL (3 errors, 1 warnings)" in render_text(report)


def _tiny_pack(
    base_config: EngineConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    text: str,
    extra_import: str = "",
    **update: object,
) -> EngineConfig:
    module = f"lint_tiny_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(TINY_PACK.format(extra=extra_import), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "handbook.md").write_text(text, encoding="utf-8")
    fixtures = _golden(tmp_path / "golden", module, "  - {id: q1, question: 'Scope?', gold: [handbook#Scope]}\n")
    entry = base_config.pack("company_x_kb").model_copy(
        update={
            "name": module,
            "path": str(tmp_path),  # the module lies in the pack's path
            "module": module,
            "corpus": str(corpus),
            "fixtures": str(fixtures),
            **update,
        }
    )
    return _only(base_config, entry)


def test_duplicate_local_id(base_config: EngineConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _tiny_pack(
        base_config,
        tmp_path,
        monkeypatch,
        text="# Handbook\n## Scope\nAll staff.\n## Part 4/Schedule 1\nFees.\n## Scope\nAgain.\n",
    )
    report = lint_packs(cfg, ROOT)
    assert [(f.code, f.where) for f in report.findings] == [("duplicate_local_id", "handbook#Scope")]
    assert report.exit_code == 1 and report.packs[0].chunks == 3


def test_pack_module_importing_something_else(
    base_config: EngineConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _tiny_pack(
        base_config,
        tmp_path,
        monkeypatch,
        text="# Handbook\n## Scope\nAll staff.\n",
        extra_import="import neo4j\nfrom rag_engine import yaml_safe\nfrom rag_engine.config import PackEntry",
    )
    report = lint_packs(cfg, ROOT)
    forbidden = [f for f in report.findings if f.code == "forbidden_import"]
    assert [f.message.split(";")[0] for f in forbidden] == [
        "imports neo4j",
        "imports rag_engine.yaml_safe",
        "imports rag_engine.config",
    ]
    assert all(f.severity == "error" and f.where.split(":")[1] in {"2", "3", "4"} for f in forbidden)
    assert _codes(report) == {"forbidden_import"} and report.exit_code == 1


def test_extraction_needs_declared_types(
    base_config: EngineConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = (ROOT / "packs/company_x_kb/manifest.yaml").read_text(encoding="utf-8")
    path = tmp_path / "manifest.yaml"
    path.write_text(
        manifest.replace(
            "relationship_types: [owns, approves, escalates_to, depends_on, supersedes, applies_to]",
            "relationship_types: []",
        ),
        encoding="utf-8",
    )
    cfg = _tiny_pack(base_config, tmp_path, monkeypatch, text="# Handbook\n## Scope\nAll staff.\n", manifest=str(path))
    assert _codes(lint_packs(cfg, ROOT)) == {"extraction_types"}
    off = cfg.model_copy(update={"packs": (cfg.packs[0].model_copy(update={"extraction": False}),)})
    assert lint_packs(off, ROOT).findings == ()


def test_collection_no_role_reads_is_a_warning(
    base_config: EngineConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _tiny_pack(base_config, tmp_path, monkeypatch, text="# Handbook\n## Scope\nAll staff.\n")
    cfg = cfg.model_copy(update={"roles": {"public": ("kb_public",)}})
    report = lint_packs(cfg, ROOT)
    assert [(f.severity, f.code, f.where) for f in report.findings] == [
        ("warning", "unreadable_collection", "kb_internal")
    ]
    assert report.exit_code == 0


def test_cli_json_and_exit_codes() -> None:
    result = rag("packs", "lint", "--pack", "company_x_kb", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["errors"] == 0 and data["exit_code"] == 0 and data["packs"][0]["pack"] == "company_x_kb"
    assert {f["severity"] for f in data["findings"]} <= {"warning"}
    text = rag("packs", "lint", "--pack", "company_x_kb")
    assert text.exit_code == 0 and "company_x_kb: ok (0 errors" in text.stdout
    assert rag("packs", "lint", "--pack", "nope").exit_code == 2


def test_golden_question_without_a_content_word_is_a_warning(base_config: EngineConfig, tmp_path: Path) -> None:
    """The text analyzer's evidence words: a question of stopwords and question frame only passes the
    evidence check by default and gives no lexical leg anything to match."""
    name = f"lint_{uuid.uuid4().hex[:8]}"
    pack = temp_pack(Engine(base_config, ROOT), name, tmp_path / "corpus", {"pol-900.md": POLICY})
    fixtures = _golden(
        tmp_path / "golden",
        name,
        """\
  - {id: q1, question: "How fast must a lost laptop be reported?", gold: [pol-900#lost-devices], role: employee}
  - {id: q2, question: "What is it, and how must we do it?", gold: [pol-900#lost-devices], role: employee}
""",
    )
    entry = pack.entry.model_copy(update={"fixtures": str(fixtures)})
    report = lint_packs(_only(base_config, entry), ROOT)
    words = [(f.severity, f.where) for f in report.findings if f.code == "golden_no_content_word"]
    assert words == [("warning", "q2")]
    assert report.errors == 0
