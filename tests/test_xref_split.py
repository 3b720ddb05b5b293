"""The cross-reference gold's dev/test split is the committed rule's draw, and the ablation that
measures the rules written for quirks of the gold turns off the rule it names (pure: no services)."""

from __future__ import annotations

import pytest

from evals import xref_ablation, xref_gold
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


def test_every_ablation_matches_the_pack_exactly_once():
    source = (ROOT / xref_ablation.PACK_MODULE).read_text(encoding="utf-8")
    for ab in xref_ablation.ABLATIONS:
        assert xref_ablation.ablated_source(source, (ab,)) != source, ab.name
    with pytest.raises(xref_ablation.StaleAblation, match="lost_dash"):
        xref_ablation.ablated_source(source.replace("|[ ]{2,})", "|[ ]{3,})"), xref_ablation.ABLATIONS[:1])


def test_an_ablated_copy_lacks_its_rule_and_the_pack_keeps_it():
    from packs.adgm_rulebooks import pack as module

    source = (ROOT / xref_ablation.PACK_MODULE).read_text(encoding="utf-8")
    ablated: dict[str, object] = {}
    lost_dash = next(a for a in xref_ablation.ABLATIONS if a.name == "lost_dash")
    exec(compile(xref_ablation.ablated_source(source, (lost_dash,)), "pack.py", "exec"), ablated)
    text = "see Rules 17.1  17.6 of GEN"
    keys = {k for _, k, *_ in module.parse_references(text, "gen")}
    assert {"gen:17.1", "gen:17.3", "gen:17.6"} <= keys  # the range whose dash the data lost
    ablated_keys = {k for _, k, *_ in ablated["parse_references"](text, "gen")}  # type: ignore[operator]
    assert "gen:17.1" in ablated_keys and "gen:17.3" not in ablated_keys
