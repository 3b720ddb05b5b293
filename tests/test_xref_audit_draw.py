"""The cross-reference audit lists exactly the seeded draw a committed script makes, so the
precision estimate rests on a sample nobody picked; a swapped pair fails the check."""

from __future__ import annotations

import yaml

from evals import xref_audit
from rag_engine import yaml_safe


def test_the_committed_audit_is_exactly_the_seeded_draw(capsys):
    assert xref_audit.main(["--check"]) == 0, capsys.readouterr().err


def test_a_pair_swapped_for_another_is_found(tmp_path, monkeypatch, capsys):
    audit = yaml_safe.load_file(xref_audit.AUDIT)
    report = xref_audit.full_report()
    drawn = {(s, t) for _, s, t in xref_audit.draw(report, int(audit["sample_seed"]))}
    other = next(p for p in xref_audit.unjudged(report, "Internal") if p not in drawn)
    audit["pairs"][0] = {**audit["pairs"][0], "source": other[0], "target": other[1]}
    path = tmp_path / "xref_audit.yaml"
    path.write_text(yaml.safe_dump(audit), encoding="utf-8")
    monkeypatch.setattr(xref_audit, "AUDIT", path)
    monkeypatch.setattr(xref_audit, "ROOT", tmp_path)
    monkeypatch.setattr(xref_audit, "full_report", lambda: report)
    assert xref_audit.main(["--check"]) == 1
    assert "not the seeded draw" in capsys.readouterr().err
