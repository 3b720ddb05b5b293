"""The cross-reference gold's dev/test split is the committed rule's draw (pure: no services)."""

from __future__ import annotations

import pytest

from evals import xref_gold
from evals.xref_gold import XrefInputError, load_split, split_of
from tests.conftest import ROOT

SPLIT = ROOT / "packs" / "adgm_rulebooks" / "golden" / xref_gold.SPLIT_NAME


def test_the_committed_split_is_the_rules_draw(capsys):
    assert xref_gold.main(["--check"]) == 0, capsys.readouterr().err


def test_a_document_moved_by_hand_fails_the_check(tmp_path, monkeypatch, capsys):
    text = SPLIT.read_text(encoding="utf-8")
    assert "\n- pru\n" in text and split_of("pru") == "dev"
    golden = tmp_path / "packs" / "adgm_rulebooks" / "golden"
    golden.mkdir(parents=True)
    (golden / xref_gold.SPLIT_NAME).write_text(text.replace("\n- pru\n", "\n").replace("test:\n", "test:\n- pru\n"))
    corpus = tmp_path / "packs" / "adgm_rulebooks" / "corpus" / "gold"
    corpus.mkdir(parents=True)
    (corpus / "xref_links.jsonl").write_bytes((ROOT / "packs/adgm_rulebooks/corpus/gold/xref_links.jsonl").read_bytes())
    monkeypatch.setattr(xref_gold, "__file__", str(tmp_path / "evals" / "xref_gold.py"))
    assert xref_gold.main(["--check"]) == 1
    assert "not the rule's draw" in capsys.readouterr().err


def test_a_gold_document_in_no_split_or_in_both_is_refused(tmp_path):
    path = tmp_path / "split.yaml"
    path.write_text("dev: [aml]\ntest: [cobs]\n")
    assert load_split(path, ["aml", "cobs"]) == {"dev": {"aml"}, "test": {"cobs"}}
    with pytest.raises(XrefInputError, match="in no split"):
        load_split(path, ["aml", "cobs", "pru"])
    path.write_text("dev: [aml, cobs]\ntest: [cobs]\n")
    with pytest.raises(XrefInputError, match="in dev and test"):
        load_split(path, ["aml", "cobs"])
