"""The package's layout keeps its shape: the rooms of ``ragstream/`` and the one way imports
run between them (the contracts in ``pyproject.toml``, checked by import-linter), no import
circle between two files (grimp's graph, the one import-linter reads), a top level that reads
as a table of contents, ``docs/architecture.md`` naming the rooms in the contracts' order,
and files a person can hold in their head. Each check is shown failing on a layout made to
break it."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ragstream"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
#: ``__init__.py``, ``__main__.py`` and ten rooms at most
MOST_TOP_LEVEL = 12
#: a module longer than this says in its docstring why it stays whole
LONG_MODULE = 800
WHY_WHOLE = "stays whole"


def lint(config: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--config", str(config), "--no-cache"],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


def circles(package: str) -> list[list[str]]:
    """The import circles between modules of ``package``, counting imports inside functions and
    those made only for type checking: the strongly connected parts of grimp's graph with more
    than one module (Tarjan)."""
    graph = grimp.build_graph(package, cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for m in sorted(edges):
        if m not in index:
            visit(m)
    return found


def contract_layers() -> list[str]:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (rooms,) = [c for c in conf["tool"]["importlinter"]["contracts"] if c["id"] == "rooms"]
    return [name.strip() for layer in rooms["layers"] for name in layer.split("|")]


# --------------------------------------------------------------------------- the contracts


def test_the_import_contracts_hold():
    done = lint(ROOT / "pyproject.toml", ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_a_room_importing_a_room_above_it_breaks_the_contract(tmp_path):
    """The same check on a copy of the contracts with two rooms swapped: ``stages`` over
    ``answering`` is broken by the answer's use of the controller."""
    conf = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    swapped = conf.replace('    "answering",\n    "stages | knowledge",',
                           '    "stages | knowledge",\n    "answering",')
    assert swapped != conf
    (tmp_path / "pyproject.toml").write_text(swapped, encoding="utf-8")
    done = lint(tmp_path / "pyproject.toml", ROOT)
    assert done.returncode != 0
    assert "ragstream.stages is not allowed to import ragstream.answering" not in done.stdout
    assert "ragstream.answering is not allowed to import ragstream.stages" in done.stdout


def test_no_stage_imports_the_workbench():
    """A conversation's turns reach Retrieval as chunks (``stages/sources.py``): no stage
    module imports anything of ``ragstream.workbench``, not even inside a function."""
    graph = grimp.build_graph("ragstream", cache_dir=None)
    stages = {m for m in graph.modules if m.startswith("ragstream.stages")}
    bad = [(m, d) for m in sorted(stages) for d in graph.find_modules_directly_imported_by(m)
           if d.startswith("ragstream.workbench")]
    assert bad == []


# --------------------------------------------------------------------------- circles


def test_no_import_circle_between_files():
    assert circles("ragstream") == []


def test_the_circle_check_finds_a_circle(tmp_path, monkeypatch):
    pkg = tmp_path / "circled"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from circled.b import g\n    return g\n")
    (pkg / "b.py").write_text("from circled.a import f\n\ndef g():\n    return f\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                              "    from circled.d import D\n")
    (pkg / "d.py").write_text("from circled.c import TYPE_CHECKING as D\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert sorted(circles("circled")) == [["circled.a", "circled.b"], ["circled.c", "circled.d"]]


# --------------------------------------------------------------------------- the rooms


def test_the_top_level_is_a_table_of_contents():
    entries = sorted(p.name for p in PACKAGE.iterdir() if p.name != "__pycache__")
    assert len(entries) <= MOST_TOP_LEVEL, entries
    rooms = [p for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert {p.name for p in rooms} == set(contract_layers()), "every room is in the contracts"
    for room in rooms:
        doc = ast.get_docstring(ast.parse((room / "__init__.py").read_text(encoding="utf-8")))
        assert doc and len(doc.split()) >= 12, f"{room.name}/__init__.py says what it holds"


def test_the_architecture_page_names_the_rooms_in_the_contracts_order():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    places = [page.find(f"`{room}/`") for room in contract_layers()]
    missing = [room for room, at in zip(contract_layers(), places) if at < 0]
    assert not missing, f"docs/architecture.md does not name {missing}"
    assert places == sorted(places), "docs/architecture.md lists the rooms top to bottom"


@pytest.mark.parametrize("path", sorted(p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*.py")
                                        if len(p.read_text(encoding="utf-8").splitlines()) > LONG_MODULE))
def test_a_long_module_says_why_it_stays_whole(path):
    doc = ast.get_docstring(ast.parse((ROOT / path).read_text(encoding="utf-8"))) or ""
    assert WHY_WHOLE in " ".join(doc.split()), f"{path} is over {LONG_MODULE} lines"


def test_the_page_script_is_its_layout_only():
    assert len((ROOT / "ui_streamlit.py").read_text(encoding="utf-8").splitlines()) <= 250
