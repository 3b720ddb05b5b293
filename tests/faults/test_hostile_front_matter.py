"""Round two, H2 and L1: documents whose few bytes cost minutes, gigabytes or a crash.

- H2: a 547-byte YAML alias bomb in front matter (9 levels x 10, ``title: *a8``) stalled the whole
  ingest: ``str(title)`` built the expanded string first (7 levels: 70 s, 882 MB).
- L1: 5,000 levels of YAML, a deep ADGM header, a 5,000-digit integer: a RecursionError or
  ValueError recorded as "failed", not "rejected", and every later step then failed with
  ``FileNotFoundError: no source artifact``, again on every run.
"""

from __future__ import annotations

import time

import pytest

from rag_engine import yaml_safe
from rag_engine.ingest.pipeline import ingest_pack
from rag_engine.ops.pack_lint import lint_pack
from tests.conftest import ROOT
from tests.support.packs import POLICY, temp_pack


def alias_bomb(levels: int = 9, width: int = 10) -> str:
    lines = ['a0: &a0 "lol"']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    lines.append(f"title: *a{levels - 1}")
    return "---\n" + "\n".join(lines) + "\ncollection: kb_public\n---\n# Bomb\n\n## Body\nNothing here.\n"


def deep_yaml(levels: int = 5000) -> str:
    return "---\ntitle: " + "[" * levels + "]" * levels + "\n---\n# Deep\n\n## Body\nText.\n"


BIG_INT = "---\nid: " + "9" * 5000 + "\ncollection: kb_public\n---\n# Big\n\n## Body\nText.\n"
LIST_TITLE = "---\ntitle: [a, b]\ncollection: kb_public\n---\n# Listed\n\n## Body\nText.\n"

HOSTILE = {
    "bomb.md": (alias_bomb(), "aliases"),
    "deep.md": (deep_yaml(), "nested deeper than"),
    "bigint.md": (BIG_INT, "a value cannot be read"),
    "listed.md": (LIST_TITLE, "must be text"),
}


def test_yaml_refuses_aliases_depth_and_unbuildable_scalars_and_trusted_files_may_use_anchors():
    started = time.perf_counter()
    for text, why in [(alias_bomb()[4:].split("---")[0], "aliases"), (deep_yaml()[4:].split("---")[0], "deeper")]:
        with pytest.raises(yaml_safe.UnsafeYamlError, match=why):
            yaml_safe.load(text, source="doc.md", first_line=2)
    with pytest.raises(yaml_safe.UnsafeYamlError, match=r"doc\.md: a value cannot be read"):
        yaml_safe.load("n: " + "9" * 5000, source="doc.md")
    assert time.perf_counter() - started < 2
    assert yaml_safe.load("a: &x [1]\nb: *x\n", allow_aliases=True) == {"a": [1], "b": [1]}


def test_hostile_front_matter_is_rejected_fast_and_the_other_documents_are_ingested(fault_engine, unique, tmp_path):
    files = {name: text for name, (text, _) in HOSTILE.items()}
    pack = temp_pack(fault_engine, unique, tmp_path / "corpus", {**files, "policy.md": POLICY})
    for run in range(2):  # the same outcome on every run: rejected, never "failed" and retried
        started = time.perf_counter()
        reports = ingest_pack(fault_engine, pack, extract=False, skip_unchanged=run > 0)
        assert time.perf_counter() - started < 120
        rejected = {k.split("--")[0]: v for k, v in reports["source_documents"].rejected.items()}
        for name, (_, why) in HOSTILE.items():
            assert why in rejected[name.removesuffix(".md")], (name, rejected)
        for step, report in reports.items():
            assert not report.failed, (step, report.failed)
        if run == 0:
            assert [k.split("--")[0] for k in reports["graph_writes"].done] == ["policy"]
        skipped = {k.split("--")[0] for k in reports["chunks"].skipped}
        assert skipped == {n.removesuffix(".md") for n in HOSTILE}


def test_pack_lint_reports_hostile_front_matter_without_stalling(fault_engine, unique, tmp_path):
    files = {name: text for name, (text, _) in HOSTILE.items()}
    pack = temp_pack(fault_engine, unique, tmp_path / "corpus", {**files, "policy.md": POLICY})
    cfg = fault_engine.cfg.model_copy(update={"packs": (*fault_engine.cfg.packs, pack.entry)})
    started = time.perf_counter()
    _, findings = lint_pack(cfg, pack.entry, ROOT)
    assert time.perf_counter() - started < 30
    rejected = {f.where: f.message for f in findings if f.code == "document_rejected"}
    for name, (_, why) in HOSTILE.items():
        assert why in rejected[name], (name, rejected)


def test_a_deep_or_huge_adgm_header_is_rejected_not_failed(fault_engine, unique, tmp_path):
    passage = '{"passage_id": "1.1", "text": "The Regulator may require a report."}\n'
    files = {
        "deep.jsonl": "[" * 5000 + "]" * 5000 + "\n" + passage,
        "bignum.jsonl": '{"code": "X", "document_id": ' + "9" * 5000 + ', "title": "T"}\n' + passage,
    }
    pack = temp_pack(fault_engine, unique, tmp_path / "corpus", files, base="adgm_rulebooks")
    reports = ingest_pack(fault_engine, pack, extract=False)
    rejected = {k.split("--")[0] for k in {**reports["source_documents"].rejected, **reports["chunks"].rejected}}
    assert rejected == {"deep", "bignum"}
    for step, report in reports.items():
        assert not report.failed, (step, report.failed)
