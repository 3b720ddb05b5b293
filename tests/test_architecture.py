"""The engine's import graph, read from the source with ``ast``: no circle, no arrow up a floor.

Every import counts: module level, inside a function, and under ``TYPE_CHECKING``, since an import
moved into a function or a type-only block still ties the two modules together. The floors are
the ones ``docs/architecture.md`` draws; a room (a top-level module or package of ``rag_engine``)
may import its own modules and any room on a lower floor, never one on its own floor or above.
Dagster stays out by ruff's banned-api rule; the evals (fixture generators included) stay out
here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = "rag_engine"

FLOORS: tuple[frozenset[str], ...] = (
    # the package's own constants, plain types, text helpers and spans
    frozenset({PKG, "usage", "text", "yaml_safe", "tracing"}),
    frozenset({"errors"}),
    frozenset({"config"}),
    frozenset({"packs", "store", "providers"}),
    frozenset({"engine"}),
    frozenset({"governance"}),
    frozenset({"graph"}),
    frozenset({"ingest", "retrieval"}),
    frozenset({"ops", "serving"}),
    frozenset({"cli"}),
)
"""Bottom to top. ``engine`` composes config, packs, store and providers; governance, graph, the
pipeline and the query path take an engine; operator reports read all of them; the CLI is the top."""

MAX_LINES = 500
"""No module is longer, and none may say why it is: a long module is split by concern."""


def modules(root: Path = ROOT / PKG) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str, path: Path, known: dict[str, Path], pkg: str = PKG) -> Iterator[tuple[str, int, str]]:
    """(imported module, line, raw target) for every import of the package in ``module``.

    ``from P import a`` depends on ``P`` itself as well as on ``P.a`` when ``a`` is a module: the
    statement runs ``P/__init__.py`` and reads its namespace, so a package whose ``__init__``
    imports a module that imports ``from P ...`` is a circle (``cli`` -> ``cli.app`` ->
    ``cli.commands`` -> ``cli``)."""
    here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
            targets = list(
                dict.fromkeys([base] + [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known])
            )
        else:
            continue
        for raw in targets:
            if raw == pkg or raw.startswith(pkg + "."):
                target = _resolve(raw, known)
                if target and target != module:
                    yield target, node.lineno, raw
            elif raw.split(".")[0] in ("evals", "rag_assets", "dagster", "tests"):
                yield raw, node.lineno, raw


def room(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def floor(module: str) -> int:
    r = room(module)
    for i, rooms in enumerate(FLOORS):
        if r in rooms:
            return i
    raise AssertionError(f"{module}: room {r!r} is on no floor; add it to FLOORS and docs/architecture.md")


def graph(root: Path = ROOT / PKG) -> dict[str, set[str]]:
    known = modules(root)
    return {m: {t for t, _, _ in imports(m, p, known, root.name) if t in known} for m, p in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_engine_has_no_import_circle() -> None:
    assert cycles(graph()) == []


def test_cycles_finds_a_circle_and_a_self_contained_chain() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def _plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_a_planted_circle_inside_a_package_is_found(tmp_path: Path) -> None:
    """The shape ``rag_engine.cli`` had: the package's ``__init__`` loads ``app``, ``app`` loads
    ``commands``, and ``commands`` imports a sibling through the package."""
    root = _plant(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "cli/__init__.py": "from pkg.cli.app import main\n",
            "cli/app.py": "from pkg.cli import commands\n\ndef main() -> None: ...\n",
            "cli/commands.py": "from pkg.cli import render\n",
            "cli/render.py": "",
        },
    )
    assert cycles(graph(root)) == [["pkg.cli", "pkg.cli.app", "pkg.cli.commands"]]
    (root / "cli/__init__.py").write_text("", encoding="utf-8")
    assert cycles(graph(root)) == []


def too_long(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > MAX_LINES:
            found.append(f"{path.relative_to(root.parent)}: {lines} lines")
    return found


@pytest.mark.parametrize("package", [PKG, "rag_assets", "evals"])
def test_no_module_is_over_the_line_limit(package: str) -> None:
    assert too_long(ROOT / package) == []


def test_a_planted_long_module_fails_whatever_its_docstring_says(tmp_path: Path) -> None:
    doc = '"""Longer than 500 lines because it says so."""\n'
    root = _plant(tmp_path / "pkg", {"long.py": doc + "x = 1\n" * MAX_LINES, "short.py": doc})
    assert too_long(root) == [f"pkg/long.py: {MAX_LINES + 1} lines"]


def foreign_imports(package: str, banned: str, root: Path = ROOT) -> list[str]:
    """Every import of ``banned`` (module level, in a function or type-only) in ``package``."""
    found = []
    for path in sorted((root / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            found += [f"{path.relative_to(root)}:{node.lineno} imports {n}" for n in names if n.split(".")[0] == banned]
    return found


def test_the_evals_never_import_the_dagster_layer() -> None:
    """One direction: ``rag_assets`` runs the evals (the eval report asset and its gate), so the
    evals, their fixture generators and benches never import ``rag_assets``."""
    assert foreign_imports("evals", "rag_assets") == []


def test_a_planted_import_of_the_dagster_layer_is_found(tmp_path: Path) -> None:
    _plant(tmp_path / "evals", {"bench.py": "def f() -> None:\n    from rag_assets.definitions import x\n"})
    assert foreign_imports("evals", "rag_assets", tmp_path) == ["evals/bench.py:2 imports rag_assets.definitions"]


def test_no_import_points_up_a_floor_or_sideways() -> None:
    known = modules()
    wrong = [
        f"{m}:{line} imports {raw} ({room(m)} on floor {floor(m)}, {room(t)} on floor {floor(t)})"
        for m, p in known.items()
        for t, line, raw in imports(m, p, known)
        if t in known and room(t) != room(m) and floor(t) >= floor(m)
    ]
    assert wrong == []


def test_the_engine_imports_neither_dagster_nor_the_evals_nor_the_tests() -> None:
    known = modules()
    outside = [
        f"{m}:{line} imports {raw}" for m, p in known.items() for t, line, raw in imports(m, p, known) if t not in known
    ]
    assert outside == []


def test_errors_import_nothing_of_the_engine_but_the_usage_record() -> None:
    known = modules()
    assert {t for t, _, _ in imports(f"{PKG}.errors", known[f"{PKG}.errors"], known)} <= {f"{PKG}.usage"}


def test_no_comment_or_docstring_cites_an_issue_number() -> None:
    import re

    cite = re.compile(r"\b(?:issue|task)s? #?\d+\b|\(#\d+\)|, #\d+\)", re.IGNORECASE)
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for package in (PKG, "rag_assets", "evals", "tests", "packs", "tools")
        for path in sorted((ROOT / package).rglob("*.py"))
        if ".state" not in path.parts and path.name != "test_architecture.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if cite.search(line)
    ]
    assert found == []
