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
    assert doc_tables.main(["--check"]) == 1
    assert "python -m evals.doc_tables --write" in capsys.readouterr().err
    assert doc_tables.main(["--write"]) == 0 and doc_tables.main(["--check"]) == 0
    assert doc.read_text(encoding="utf-8") == text
