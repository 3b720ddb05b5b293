"""Item 10: a repeated YAML key is refused with file:line wherever the project reads YAML.

The probe: a front matter with two ``collection:`` lines published an internal document (YAML
keeps the last), and a role listed twice in engine.yaml widened ``public``; both passed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rag_engine.config import load_config
from rag_engine.errors import ConfigError, EvalInputError, PackError
from rag_engine.ingest.pipeline import ingest_pack
from tests.conftest import ROOT
from tests.support.packs import RUNBOOK, graph_counts, temp_pack

CONFIG = (ROOT / "config" / "engine.yaml").read_text(encoding="utf-8")


def _line(text: str, needle: str, nth: int = 1) -> int:
    hits = [i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith(needle)]
    return hits[nth - 1]


def test_engine_yaml_with_a_repeated_role_is_refused_with_file_and_line(tmp_path: Path):
    public = next(ln for ln in CONFIG.splitlines() if ln.startswith("  public:"))
    text = CONFIG.replace(public + "\n", public + "\n  public: [kb_public, kb_internal]\n", 1)
    path = tmp_path / "engine.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    msg = str(exc.value)
    assert f"engine.yaml:{_line(text, '  public:', 2)}" in msg and "duplicate key 'public'" in msg, msg
    assert f"first at line {_line(text, '  public:', 1)}" in msg


LEAKY = """---
id: POL-950
collection: kb_internal
title: Salary bands
collection: kb_public
---
# Salary bands

## Bands
Band 4 earns between 80 and 95 thousand.
"""


def test_front_matter_with_a_repeated_collection_rejects_the_document(fault_engine, unique, tmp_path):
    pack = temp_pack(fault_engine, unique, tmp_path / "corpus", {"salaries.md": LEAKY, "runbook.md": RUNBOOK})
    reports = ingest_pack(fault_engine, pack, extract=False)
    rejected = reports["source_documents"].rejected
    key = next(k for k in rejected if k.startswith("salaries--"))
    # the file's own line numbers: the repeat is line 5, the first one line 3
    assert "salaries:5: duplicate key 'collection' (first at line 3)" in rejected[key], rejected[key]
    assert [k.split("--")[0] for k in reports["chunks"].done] == ["runbook"]  # the other document is written
    rows, _, _ = fault_engine.driver.execute_query(
        "MATCH (c:Chunk {pack: $pack}) RETURN DISTINCT c.doc_id AS doc, c.collection AS col", pack=unique
    )
    assert [dict(r) for r in rows] == [{"doc": "runbook", "col": "kb_internal"}]
    assert graph_counts(fault_engine, unique)["documents"] == 1


def test_manifest_with_a_repeated_key_is_refused(fault_engine, tmp_path):
    from rag_engine.packs import load_pack

    manifest = (ROOT / "packs/company_x_kb/manifest.yaml").read_text(encoding="utf-8")
    text = manifest.replace(
        "default_collection: kb_internal\n", "default_collection: kb_internal\ndefault_collection: kb_public\n", 1
    )
    path = tmp_path / "manifest.yaml"
    path.write_text(text, encoding="utf-8")
    entry = fault_engine.cfg.pack("company_x_kb").model_copy(update={"manifest": str(path)})
    with pytest.raises(
        PackError,
        match=rf"manifest.yaml:{_line(text, 'default_collection:', 2)}: "
        r"duplicate key 'default_collection'",
    ):
        load_pack(entry, ROOT)


def test_golden_file_with_a_repeated_key_is_refused(tmp_path):
    from evals.runner import load_golden

    path = tmp_path / "queries.yaml"
    path.write_text("pack: company_x_kb\nqueries:\n  - id: q1\n    question: a\n    question: b\n", encoding="utf-8")
    with pytest.raises(EvalInputError, match=r"queries.yaml:5: duplicate key 'question' \(first at line 4\)"):
        load_golden(path)


def test_pricing_with_a_repeated_model_is_refused(tmp_path):
    from rag_engine.providers.pricing import load_pricing

    path = tmp_path / "pricing.yaml"
    path.write_text(
        'version: "v1"\ncurrency: USD\nmodels:\n  m: {input_per_million: "1", output_per_million: "1"}\n'
        '  m: {input_per_million: "0", output_per_million: "0"}\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"pricing.yaml:5: duplicate key 'm'"):
        load_pricing(path)


def test_no_module_reads_yaml_around_the_strict_loader():
    """One loader everywhere: a new yaml.safe_load / yaml.load in shipped code would bring the
    last-key-wins behaviour back."""
    offenders = []
    for base in ("rag_engine", "rag_assets", "evals", "packs"):
        for path in (ROOT / base).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if "yaml.safe_load(" in text or "yaml.load(" in text or "yaml.full_load(" in text:
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_libyamls_reader_and_the_pure_python_one_read_every_project_yaml_alike():
    """``load`` reads with libyaml's C reader when PyYAML has it (ten times faster: every process
    reads the engine config and the pack manifests) and falls back to the pure-Python reader on any
    document libyaml refuses; the two must agree on every YAML file the project ships."""
    from rag_engine import yaml_safe

    if not yaml_safe.LIBYAML:
        pytest.skip("PyYAML without libyaml: only the pure-Python reader exists")
    files = sorted(
        p
        for pattern in ("*.yaml", "*.yml")
        for p in ROOT.rglob(pattern)
        if not any(part.startswith(".") or part in ("var", "node_modules") for part in p.relative_to(ROOT).parts)
    )
    texts = {p: p.read_text(encoding="utf-8") for p in files}
    for doc in sorted(ROOT.glob("packs/*/corpus/**/*.md")):  # front matter: YAML between --- lines
        head = doc.read_text(encoding="utf-8").split("\n---\n", 1)
        if head[0].startswith("---\n") and len(head) == 2:
            texts[doc] = head[0][4:]
    assert len(files) > 10 and len(texts) > len(files)
    for path, text in texts.items():
        reads = []
        for cls in (yaml_safe._FastLoader, yaml_safe._StrictLoader):
            try:
                reads.append(yaml_safe._read(cls, text, path, 1, allow_aliases=True))
            except yaml.YAMLError as exc:
                reads.append(type(exc).__name__)
        assert reads[0] == reads[1], path
