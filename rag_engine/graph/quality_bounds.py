"""The graph's place in a ranking, bounded by construction whatever the weights say.

Two rules, applied to a ranked list after fusion (``retrieval.retriever`` calls ``bounded`` on its
final order):

1. Exact hits are protected: no candidate the graph contributed to (graph-only or graph plus text)
   ranks above a passage the question named by its reference or phrase, unless it is one.
2. At most ``traversal.max_graph_only_in_top_k`` candidates found by traversal alone sit in the
   top k; the lowest-ranked extra ones leave it and the next candidates move up.

Generic over the candidate type (the graph floor does not import retrieval): the caller says what
is exact, graph-contributed and graph-only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def bounded(
    ranked: list[T],
    k: int,
    cap: int,
    *,
    exact: Callable[[T], bool],
    graph: Callable[[T], bool],
    graph_only: Callable[[T], bool],
) -> list[T]:
    """``ranked`` reordered by the two rules (module docstring); the caller takes the first k."""
    last = max((i for i, c in enumerate(ranked) if exact(c)), default=-1)
    head = ranked[: last + 1]
    behind = [c for c in head if graph(c) and not exact(c)]
    out = [c for c in head if not (graph(c) and not exact(c))] + behind + ranked[last + 1 :]
    kept: list[T] = []
    pushed: list[T] = []
    for c in out:
        if len(kept) >= k:
            break
        if graph_only(c) and sum(1 for x in kept if graph_only(x)) >= cap:
            pushed.append(c)
            continue
        kept.append(c)
    rest = [c for c in out if not any(c is x for x in kept) and not any(c is x for x in pushed)]
    return kept + pushed + rest
