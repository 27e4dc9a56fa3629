"""The control plane's wings are folders, and imports run one way.

Walks every module of opsdctl/ with `ast` (nothing is imported), builds the graph of imports
between opsdctl modules (top-level and inside functions alike), and checks:
  - no circle among modules;
  - no import from a lower wing to a higher one: cli -> client -> daemon -> identity -> contract
    -> plan -> stats -> config -> recipes -> store -> foundations (errors, fsutil, templates).
    Clients (queue, cancel, wait) may use what the daemon knows of processes and frozen stage
    settings, never the reverse; the daemon runs stages in code identity's snapshots and reads
    them through the stage contract's parsers. `config` is the workspace's settings: it validates
    recipes' knobs and profiles, and every wing above reads it, so it sits between them.
The trainer package is checked for circles too (its config types live apart from its CLI).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ORDER = ["cli", "client", "daemon", "identity", "contract", "plan", "stats", "config", "recipes", "store", "foundation"]
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
            for a in node.names:  # `from opsdctl.daemon import procs` imports the module opsdctl.daemon.procs
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


# --- the architecture's folders -----------------------------------------------------------

WINGS = {  # a module each wing must hold, as a witness that the split is the one documented
    "client": ("enqueue", "eval_only", "cancel", "wait", "chain_diff", "worker_view"),
    "daemon": ("worker", "executors", "local", "ray_cluster", "procs", "subreaper", "salvage", "stages"),
    "identity": ("snapshot", "content_store", "code_view", "snapshot_check", "snapshot_lock", "gc"),
    "contract": ("results", "score_checks", "log_metrics", "effective_config", "stage_json", "score_row"),
}


def test_client_daemon_identity_contract_are_folders():
    for wing_name, witnesses in WINGS.items():
        folder = ROOT / "opsdctl" / wing_name
        assert (folder / "__init__.py").is_file(), f"opsdctl/{wing_name}/ is not a package"
        missing = [m for m in witnesses if not (folder / f"{m}.py").is_file()]
        assert not missing, f"opsdctl/{wing_name}/ lacks {missing}"
    assert not (ROOT / "opsdctl" / "run").exists(), "opsdctl/run/ is split into client, daemon, identity, contract"


# --- the command line: one command per module, no module-level state ------------------------

COMMANDS_DIR = ROOT / "opsdctl" / "cli" / "commands"


def command_modules() -> list[Path]:
    return sorted(p for p in COMMANDS_DIR.glob("*.py") if p.name != "__init__.py")


def defines_commands(tree: ast.Module) -> list[str]:
    """Typer commands a module declares itself: `@x.command(...)` decorators and `x.command(...)(f)`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                if isinstance(target, ast.Attribute) and target.attr in ("command", "callback"):
                    found.append(f"@{target.attr} on {node.name}")
    return found


def test_one_command_per_module_in_cli_commands():
    from opsdctl.cli.main import COMMANDS, app, command_name

    modules = command_modules()
    assert modules, "no command modules"
    for path in modules:
        tree = ast.parse(path.read_text())
        top = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "command"]
        assert top == ["command"], f"{path.name}: must define exactly one top-level `command` function"
        assert not defines_commands(tree), f"{path.name}: registers commands itself: {defines_commands(tree)}"
    for path in sorted((ROOT / "opsdctl").rglob("*.py")):
        if path.parent != COMMANDS_DIR and path.name != "main.py":
            assert not defines_commands(ast.parse(path.read_text())), f"{path}: a command outside cli/commands/"
    registered = {c.name: c.callback.__module__ for c in app.registered_commands}
    assert registered == {p.stem.replace("_", "-"): f"opsdctl.cli.commands.{p.stem}" for p in modules}
    assert len(COMMANDS) == len(modules) and all(command_name(m) in registered for m in COMMANDS)


MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "OrderedDict", "deque", "Counter", "bytearray"}


def module_state(tree: ast.Module) -> list[str]:
    """Module-level mutable containers and `global` statements: state that outlives one command."""
    found = []
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) else None
        if isinstance(node, ast.AugAssign):
            found.append(f"line {node.lineno}: augmented assignment at module level")
        elif isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)):
            found.append(f"line {node.lineno}: a mutable {type(value).__name__.lower()} at module level")
        elif isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", None)) in MUTABLE_CALLS:
            found.append(f"line {node.lineno}: a mutable {value.func.id if isinstance(value.func, ast.Name) else value.func.attr}() at module level")
    found += [f"line {n.lineno}: global {', '.join(n.names)}" for n in ast.walk(tree) if isinstance(n, ast.Global)]
    return found


def test_no_module_level_mutable_state_in_the_cli():
    bad = {str(p.relative_to(ROOT)): module_state(ast.parse(p.read_text()))
           for p in sorted((ROOT / "opsdctl" / "cli").rglob("*.py"))}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, bad


def test_the_cli_checkers_find_what_they_look_for():
    planted = ast.parse('_state: dict = {"config": None}\nSEEN = []\nN = set()\nT = (1, 2)\n'
                        'def f():\n    global T\n@app.command()\ndef g(): pass\n')
    assert [x.split(":")[0] for x in module_state(planted)] == ["line 1", "line 2", "line 3", "line 6"]
    assert defines_commands(planted) == ["@command on g"]


def test_command_modules_import_only_the_cli_at_start():
    """`opsdctl --help` and `opsdctl status` import every command module: their top-level
    imports stay light (stdlib, typer, opsdctl.cli's own helpers), each command imports what it
    needs inside, so no command pays for another's imports (SQLAlchemy, rich tables, scipy)."""
    import sys

    def light(name: str) -> bool:
        return (name.split(".")[0] in sys.stdlib_module_names or name == "typer" or name == "opsdctl.cli"
                or name.startswith("opsdctl.cli."))

    heavy = {}
    for path in command_modules():
        for node in ast.parse(path.read_text()).body:
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            heavy[path.name] = heavy.get(path.name, []) + [n for n in names if not light(n)]
    assert not {k: v for k, v in heavy.items() if v}, {k: v for k, v in heavy.items() if v}
