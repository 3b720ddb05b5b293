"""The tables ``python -m evals.runner`` prints at the end of a run: each system's ranking
quality per pack, per pack and split, and the exact reference hits' share of the top k."""

from __future__ import annotations

from evals.report import SYSTEMS, VARIANTS, EvalReport, QueryResult


def systems_table(report: EvalReport) -> str:
    """The per-pack table printed at the end of a run: each system's ranking quality."""
    cols = (("nDCG@10", "ndcg@10"), ("MAP@10", "map@10"), ("Recall@10", "recall@10"), ("MRR@10", "mrr@10"))
    lines = [f"{'pack':<33} {'system':<16} " + " ".join(f"{c:>9}" for c, _ in cols) + "  queries"]
    for pack, table in (report.systems or {}).items():
        shown = [(s, table.system(s)) for s in SYSTEMS] + [(v, table.variant(v)) for v in VARIANTS]
        for system, metrics in shown:
            if metrics is None:
                continue
            m = metrics
            values = (m.get(key) for _, key in cols)
            lines.append(
                f"{pack:<33} {system:<16} "
                + " ".join(f"{'-' if v is None else f'{v:.3f}':>9}" for v in values)
                + f"  {m.queries:>7}"
            )
    return "\n".join(lines)


def split_table(report: EvalReport) -> str:
    """Per pack and split: each system's nDCG@10 / MAP@10 / Recall@10, then what the user reads
    (rank 1, the fact stated, found but refused, out of scope answered). Test is the result;
    train and dev shaped the fitted numbers (development figures)."""
    systems = ("engine", "engine_no_sentences", "rrf", "fulltext", "dense", "bm25", "bm25_stemmed")
    head = f"{'pack@split':<26} " + " ".join(f"{s[:18]:>18}" for s in systems)
    lines = ["nDCG@10 / MAP@10 / Recall@10 per system (test: the result; train, dev: development figures)", head]
    answers = [
        f"{'pack@split':<26} {'answerable':>10} {'rank1':>6} {'facts':>6} {'stated':>7} "
        f"{'retrieved':>9} {'refused':>8} {'no-answer':>9} {'answered':>9}"
    ]

    def r(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    for key, table in (report.splits or {}).items():
        if ":" in key and not table["systems"].get("engine", {}).get("queries"):
            continue
        cells = []
        for s in systems:
            m = table["systems"].get(s)
            cells.append("-" if not m else f"{r(m['ndcg@10'])}/{r(m['map@10'])}/{r(m['recall@10'])}")
        lines.append(f"{key:<26} " + " ".join(f"{c:>18}" for c in cells))
        a = table["answers"]
        answers.append(
            f"{key:<26} {a['answerable']:>10} {r(a['rank1']):>6} {a['fact_questions']:>6} {r(a['fact_stated']):>7} "
            f"{a['gold_retrieved']:>9} {r(a['found_but_refused']):>8} {a['no_answer_questions']:>9} "
            f"{r(a['out_of_scope_answered']):>9}"
        )
    return "\n".join([*lines, "", *answers])


def exact_hits_table(report: EvalReport) -> str:
    """Per pack: how many of the engine's top-k slots went to exact reference hits, and how many of
    those were gold (reference flooding shows here first)."""
    lines = [f"{'pack':<22} {'slots':>6} {'exact':>6} {'share':>6} {'gold':>5}  queries with an exact hit"]
    by_pack: dict[str, list[QueryResult]] = {}
    for q in report.queries:
        by_pack.setdefault(q.pack, []).append(q)
    for pack, queries in by_pack.items():
        if any(q.exact is None for q in queries):
            continue
        slots = sum(len(q.ranked) for q in queries)
        exact = sum(len(q.exact or ()) for q in queries)
        gold = sum(len(set(q.exact or ()) & set(q.gold)) for q in queries)
        with_exact = sum(1 for q in queries if q.exact)
        share = exact / slots if slots else 0.0
        lines.append(f"{pack:<22} {slots:>6} {exact:>6} {share:>6.3f} {gold:>5}  {with_exact}")
    return "\n".join(lines)
