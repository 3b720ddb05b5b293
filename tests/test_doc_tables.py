"""The figure tables of docs/retrieval.md are what the committed report prints: a figure edited by
hand, or a report re-recorded without rewriting the docs, fails here."""

from __future__ import annotations

from evals import doc_tables
from tests.conftest import ROOT


def test_the_docs_tables_are_the_committed_reports(capsys):
    assert doc_tables.main(["--check"]) == 0, capsys.readouterr().err


def test_a_figure_edited_by_hand_is_found(tmp_path, monkeypatch, capsys):
    doc = tmp_path / doc_tables.DOC
    doc.parent.mkdir(parents=True)
    text = (ROOT / doc_tables.DOC).read_text(encoding="utf-8")
    start, end = doc_tables.in_doc(text) or (0, 0)
    assert end > start
    edited = text[:start] + text[start:end].replace("| engine |", "| engine (tuned) |", 1) + text[end:]
    doc.write_text(edited, encoding="utf-8")
    (tmp_path / "evals/reports").mkdir(parents=True)
    report = "evals/reports/BASELINE.json"
    (tmp_path / report).write_bytes((ROOT / report).read_bytes())
    monkeypatch.setattr(doc_tables, "ROOT", tmp_path)
    only = ["--block", "retrieval"]
    assert doc_tables.main(["--check", *only]) == 1
    assert "python -m evals.doc_tables --write" in capsys.readouterr().err
    assert doc_tables.main(["--write", *only]) == 0 and doc_tables.main(["--check", *only]) == 0
    assert doc.read_text(encoding="utf-8") == text


def test_every_block_is_checked_and_a_stale_xref_table_fails(tmp_path, monkeypatch, capsys):
    assert {b.name for b in doc_tables.BLOCKS} == {"retrieval", "xref", "xref_ablation"}
    xref = next(b for b in doc_tables.BLOCKS if b.name == "xref")
    for block in doc_tables.BLOCKS:
        (tmp_path / block.doc).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / block.doc).write_text((ROOT / block.doc).read_text(encoding="utf-8"), encoding="utf-8")
        (tmp_path / block.report).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / block.report).write_bytes((ROOT / block.report).read_bytes())
    monkeypatch.setattr(doc_tables, "ROOT", tmp_path)
    assert doc_tables.main(["--check"]) == 0
    # a re-recorded report the docs were not rewritten from: the check names the doc and the command
    report = tmp_path / xref.report
    report.write_text(report.read_text(encoding="utf-8").replace('"recall": 0.9628', '"recall": 0.9001'), "utf-8")
    assert doc_tables.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "docs/packs.md: its tables differ" in err and "0.900" in err
    assert doc_tables.main(["--write", "--block", "xref"]) == 0 and doc_tables.main(["--check"]) == 0
