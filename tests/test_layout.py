"""The control plane's wings are folders, and imports run one way.

Walks every module of opsdctl/ with `ast` (nothing is imported), builds the graph of imports
between opsdctl modules (top-level and inside functions alike), and checks:
  - no circle among modules;
  - no import from a lower wing to a higher one: cli -> run -> plan -> stats -> config -> recipes
    -> store -> foundations (errors, fsutil, templates). `config` is the workspace's settings: it validates
    recipes' knobs and profiles, and every wing above reads it, so it sits between them.
The trainer package is checked for circles too (its config types live apart from its CLI).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ORDER = ["cli", "run", "plan", "stats", "config", "recipes", "store", "foundation"]
FOUNDATION = {"errors", "fsutil", "templates", "__init__"}


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path, name: str, package_root: str) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == package_root)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_pkg else name.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, base] if base else here)
            if base.split(".")[0] != package_root:
                continue
            out.add(base)
            for a in node.names:  # `from opsdctl.run import procs` imports the module opsdctl.run.procs
                out.add(f"{base}.{a.name}")
    return out


def graph(package_root: str) -> dict[str, set[str]]:
    files = sorted((ROOT / package_root).rglob("*.py"))
    names = {module_name(p, ROOT): p for p in files}
    g = {}
    for name, path in names.items():
        g[name] = {m for m in imports_of(path, name, package_root) if m in names and m != name}
    return g


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    WHITE, GREY, BLACK = 0, 1, 2
    color = {n: WHITE for n in g}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        color[n] = GREY
        stack.append(n)
        for m in sorted(g[n]):
            if color[m] == GREY:
                return stack[stack.index(m):] + [m]
            if color[m] == WHITE and (c := visit(m)):
                return c
        stack.pop()
        color[n] = BLACK
        return None

    for n in sorted(g):
        if color[n] == WHITE and (c := visit(n)):
            return c
    return None


def wing(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "foundation"
    head = parts[1]
    if head in FOUNDATION:
        return "foundation"
    return head


def test_every_opsdctl_module_is_in_a_wing():
    g = graph("opsdctl")
    assert {wing(m) for m in g} <= set(ORDER), sorted({wing(m) for m in g} - set(ORDER))


def test_no_import_circle_in_the_control_plane():
    assert find_cycle(graph("opsdctl")) is None, " -> ".join(find_cycle(graph("opsdctl")))


def test_imports_run_one_way_from_the_cli_inward():
    g = graph("opsdctl")
    rank = {w: i for i, w in enumerate(ORDER)}
    upward = sorted(f"{a} ({wing(a)}) imports {b} ({wing(b)})"
                    for a, deps in g.items() for b in deps
                    if rank[wing(b)] < rank[wing(a)] and wing(a) != "foundation" or
                    (wing(a) == "foundation" and wing(b) != "foundation"))
    assert not upward, "\n".join(upward)


def test_no_import_circle_in_the_workloads():
    for pkg in ("trainer", "eval", "opsdkit"):
        cycle = find_cycle(graph(pkg))
        assert cycle is None, " -> ".join(cycle)


def test_each_package_says_what_it_is_for():
    for init in sorted((ROOT / "opsdctl").rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and doc.strip(), f"{init.relative_to(ROOT)} has no docstring"


def test_the_checker_finds_a_planted_circle_and_an_upward_import():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert wing("opsdctl.store.engine") == "store" and wing("opsdctl.errors") == "foundation"
