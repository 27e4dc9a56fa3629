"""The shape of the repository, checked without importing it.

The control plane's wings are folders, and imports run one way. Walks every module of opsdctl/
with `ast` (nothing is imported), builds the graph of imports between opsdctl modules (top-level
and inside functions alike), and checks:
  - no circle among modules;
  - no import from a lower wing to a higher one: cli -> client -> daemon | sim -> identity ->
    contract -> plan -> stats -> config -> recipes -> store -> foundations (errors, fsutil,
    templates). The daemon and the simulator are siblings, the two hosts of the worker's loop:
    neither imports the other.
    Clients (queue, cancel, wait) may use what the daemon knows of processes and frozen stage
    settings, never the reverse; the daemon runs stages in code identity's snapshots and reads
    them through the stage contract's parsers. `config` is the workspace's settings: it validates
    recipes' knobs and profiles, and every wing above reads it, so it sits between them;
  - no opsdctl module imports torch or another workload library, even inside a function.
The trainer package is checked for circles too (its config types live apart from its CLI).
The command line has one command per module under cli/commands/ (main.py only registers them),
no module-level mutable state, and command modules that import only the cli's helpers at start.

The tests mirror the source: tests/unit/<wing>/ holds pure, fast, in-process tests, one folder
per wing; tests/integration/ holds those that start subprocesses (the CLI, the worker, stage
scripts, the workloads). No source, test or document cites an issue tracker by number: a
comment says why, not where it was asked for. The README stays short and every document it
moved into docs/ is reachable from it by a link that resolves.
"""
from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path

from conftest import REPO as ROOT

# a tuple is siblings: one rank, and neither imports the other
ORDER = ["cli", "client", ("daemon", "sim"), "identity", "contract", "plan", "stats", "config", "recipes", "store",
         "foundation"]
RANK = {w: i for i, ws in enumerate(ORDER) for w in (ws if isinstance(ws, tuple) else (ws,))}
FOUNDATION = {"errors", "fsutil", "templates", "__init__"}


def parsed(path: Path) -> ast.Module:
    """A file's syntax tree, parsed once per run and content: a dozen checks walk every module
    (nothing mutates a tree; a file a test writes twice is parsed twice)."""
    return _parse(path.read_text(), str(path))


@functools.cache
def _parse(text: str, name: str) -> ast.Module:
    return ast.parse(text, name)


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path, name: str, package_root: str) -> set[str]:
    tree = parsed(path)
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
    assert {wing(m) for m in g} <= set(RANK), sorted({wing(m) for m in g} - set(RANK))


def test_no_import_circle_in_the_control_plane():
    assert find_cycle(graph("opsdctl")) is None, " -> ".join(find_cycle(graph("opsdctl")))


def test_imports_run_one_way_from_the_cli_inward():
    g = graph("opsdctl")
    rank = RANK
    upward = sorted(f"{a} ({wing(a)}) imports {b} ({wing(b)})"
                    for a, deps in g.items() for b in deps
                    if rank[wing(b)] < rank[wing(a)] and wing(a) != "foundation" or
                    rank[wing(b)] == rank[wing(a)] and wing(b) != wing(a) or
                    (wing(a) == "foundation" and wing(b) != "foundation"))
    assert not upward, "\n".join(upward)


def test_no_import_circle_in_the_workloads():
    for pkg in ("trainer", "eval", "opsdkit"):
        cycle = find_cycle(graph(pkg))
        assert cycle is None, " -> ".join(cycle)


def test_each_package_says_what_it_is_for():
    for init in sorted((ROOT / "opsdctl").rglob("__init__.py")):
        doc = ast.get_docstring(parsed(init))
        assert doc and doc.strip(), f"{init.relative_to(ROOT)} has no docstring"


def test_the_checker_finds_a_planted_circle_and_an_upward_import():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert wing("opsdctl.store.engine") == "store" and wing("opsdctl.errors") == "foundation"


# --- the control plane never imports a workload library ---------------------------------------

HEAVY = {"torch", "transformers", "vllm", "peft", "trl", "datasets", "accelerate"}


def heavy_imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out & HEAVY


def test_the_control_plane_never_imports_a_workload_library():
    found = {str(p.relative_to(ROOT)): sorted(heavy_imports(p)) for p in sorted((ROOT / "opsdctl").rglob("*.py"))}
    assert not {k: v for k, v in found.items() if v}


# --- tests mirror the source ----------------------------------------------------------------------

TESTS = ROOT / "tests"
# tests/unit/<wing>/: the control plane's wings (config.py is one) and the workload packages
UNIT_WINGS = {"cli", "client", "daemon", "sim", "identity", "contract", "plan", "stats", "config", "recipes", "store", "trainer", "eval", "opsdkit"}
# what starts a process or needs a built model: integration tests, never unit ones
NOT_IN_UNIT = {"subprocess", "Workspace", "opsdctl_argv", "Worker"}  # imported or called
FIXTURES_NOT_IN_UNIT = {"ws", "tiny_assets", "untrained_tiny_model"}  # requested as a fixture


def test_test_files_live_in_unit_wings_or_integration():
    misplaced = []
    for path in sorted(TESTS.rglob("test_*.py")):
        rel = path.relative_to(TESTS).parts
        if rel[0] == "integration" and len(rel) == 2:
            continue
        if rel[0] == "unit" and (len(rel) == 2 or (len(rel) == 3 and rel[1] in UNIT_WINGS)):
            continue
        misplaced.append("/".join(rel))
    assert not misplaced, "move these into tests/unit/<wing>/ or tests/integration/: " + ", ".join(misplaced)


def test_every_test_folder_is_a_package_named_for_a_wing():
    for folder in [TESTS / "unit", TESTS / "integration", *sorted(p for p in (TESTS / "unit").iterdir() if p.is_dir()
                                                          and p.name != "__pycache__")]:
        assert (folder / "__init__.py").is_file(), f"{folder.relative_to(ROOT)} has no __init__.py"
        assert folder.parent.name != "unit" or folder.name in UNIT_WINGS, folder.name


def test_a_test_imports_another_test_module_by_its_package_path():
    """`from test_x import y` resolves only when test_x's folder happens to be on sys.path (its file
    ran first in the same process): a cross-file helper is imported as unit.<wing>.test_x,
    integration.test_x or from support/."""
    bare = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(parsed(path)):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            bare += [f"{path.relative_to(TESTS)}: {n}" for n in names if n.split(".")[0].startswith("test_")]
    assert not bare, "import these by package path: " + ", ".join(bare)


def names_used(path: Path) -> set[str]:
    """Names a test module reads or imports, and the fixtures it requests (a local `ws` is no fixture)."""
    out = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Name) and node.id in NOT_IN_UNIT:
            out.add(node.id)
        elif isinstance(node, ast.arg) and node.arg in FIXTURES_NOT_IN_UNIT:
            out.add(node.arg)
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.update(a.name for a in node.names)
    return out


def test_unit_tests_start_no_process_and_build_no_model():
    banned = NOT_IN_UNIT | FIXTURES_NOT_IN_UNIT
    found = {str(p.relative_to(TESTS)): sorted(names_used(p) & banned) for p in sorted((TESTS / "unit").rglob("*.py"))}
    assert not {k: v for k, v in found.items() if v}, "these belong in tests/integration/"


# --- no tracker references ------------------------------------------------------------------------

TRACKER = re.compile(r"\bissues?\s*#?\s*\d+", re.I)
TEXT = {".py", ".md", ".toml", ".sh", ".mako", ".txt", ".json", ".cfg", ".ini", ".yaml", ".yml"}
SOURCE_DIRS = ("opsdctl", "trainer", "eval", "opsdkit", "benchmarks", "tests", "docs", "recipes", ".ci")


def text_files():
    for top in SOURCE_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and (path.suffix in TEXT or top == ".ci"):
                yield path
    yield from sorted(ROOT.glob("*.md"))
    yield ROOT / "pyproject.toml"


def tracker_references(path: Path) -> list[str]:
    text = path.read_text(errors="replace")
    return [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
            for m in TRACKER.finditer(text)]


def test_no_source_cites_an_issue_tracker():
    hits = [h for p in text_files() for h in tracker_references(p)]
    assert not hits, "say why instead:\n" + "\n".join(hits)


# files a clone does not have: the steering notes live outside the repository
OUTSIDE = re.compile(r"\.\./shared/|\b(?:domain|design)\.md\b")


def test_nothing_points_to_notes_outside_the_repository():
    hits = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in text_files() for m in OUTSIDE.finditer(p.read_text(errors="replace"))]
    assert not hits, "restate what is needed instead:\n" + "\n".join(hits)


# --- the README and the documents it links ---------------------------------------------------------

README_MAX_LINES = 200
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def local_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(path.read_text()) if "://" not in t and not t.startswith("mailto:")]


def test_readme_is_short_and_links_every_document():
    readme = ROOT / "README.md"
    assert len(readme.read_text().splitlines()) <= README_MAX_LINES
    linked = {(ROOT / t).resolve() for t in local_links(readme)}
    unlinked = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked]
    assert not unlinked, f"README.md links none of: {unlinked}"
    assert (ROOT / "DEVELOPERS.md").resolve() in linked


def test_every_local_link_in_the_documents_resolves_inside_the_repository():
    broken = []
    for doc in [ROOT / "README.md", ROOT / "DEVELOPERS.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in local_links(doc):
            path = (doc.parent / target).resolve()
            if not path.exists() or ROOT.resolve() not in path.parents:
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_the_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    command = next(line for line in readme.splitlines() if line.endswith("python -m pytest -q"))
    assert command in ci


def test_the_readmes_figures_are_the_committed_benchmarks():
    """Each figure the README states is read back from the results file its command writes: a
    re-run that moves one fails here until the README says the new figure."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    res = ROOT / "benchmarks" / "results"
    worlds = json.loads((res / "worlds.json").read_text())["results"]
    met = [k for k, f in worlds.items() if f["goals"]["gain"] and f["goals"]["p_worse_1"]]
    worst = max(f["bet"]["p_worse_1"] for f in worlds.values())
    assert f"in {len(met)} of {len(worlds)} world x layout cells" in readme
    assert f"at most {100 * worst:.1f}% of sessions" in readme
    local = max(f["local mean"]["p_worse_1"] for f in worlds.values())
    arms = [f["cover_arms"] for f in worlds.values()]
    sub = min(f["cover_submitted"] for f in worlds.values() if f["cover_submitted"] is not None)
    assert f"(the highest local mean: up to {100 * local:.1f}%)" in readme
    assert f"cover {round(100 * min(arms))}-{round(100 * max(arms))}% of arms" in readme
    assert f"the submitted arm in at least {100 * sub:.1f}% of sessions" in readme
    bound = json.loads((res / "bet_bound.json").read_text())["runs"]
    once = next(r for r in bound if r["layout"] == "2+6x1")
    assert f"holds six ideas run once below {100 * once['lower_bound']:.1f}%" in readme
    other = json.loads((res / "worlds_other.json").read_text())["results"]
    met = [k for k, f in other.items() if f["goals"]["gain"] and f["goals"]["p_worse_1"]]
    worst = max(f["bet"]["p_worse_1"] for f in other.values())
    assert f"no constant saw: {len(met)} of {len(other)} cells, at most {100 * worst:.1f}%" in readme
    goals = json.loads((res / "stats_goals.json").read_text())["rows"]
    worst = max(r["rate"] for r in goals if r["op"] == "<=" and r["goal"] == 0.05)
    assert f"worst measured case {100 * worst:.1f}%" in readme
    assert {r["goal"] for r in goals if r["op"] == "<="} == {0.05, 0.1} and "held to 10% instead" in readme


def test_the_checkers_find_what_they_look_for(tmp_path):
    cites = [w + n for w, n in (("issue", " 12"), ("Issue", " #3"), ("issues", " 3"))]  # never typed whole here
    assert TRACKER.findall(f"see {cites[0]}, {cites[1]} and {cites[2]}, 16") == cites
    assert not TRACKER.findall("an issue with the 12 runs")
    notes = "../" + "shared/x.md, " + "domain" + ".md"  # never typed whole here
    assert [m.group(0) for m in OUTSIDE.finditer(notes)] == ["../" + "shared/", "domain" + ".md"]
    f = tmp_path / "x.py"
    f.write_text("def f():\n    import torch.nn\n    from vllm import LLM\n")
    assert heavy_imports(f) == {"torch", "vllm"}
    f.write_text("import subprocess\ndef test_a(ws):\n    pass\n")
    assert names_used(f) == {"subprocess", "ws"}
    f.write_text("def test_b():\n    ws = [1]\n    return ws\n")  # a local named ws is no fixture
    assert names_used(f) == set()
    assert local_links_of("[a](docs/x.md#y) [b](https://e.org/z) [c](../other/d.md)", tmp_path) == ["docs/x.md", "../other/d.md"]


def local_links_of(text: str, tmp_path: Path) -> list[str]:
    f = tmp_path / "doc.md"
    f.write_text(text)
    return local_links(f)


# --- the architecture's folders -----------------------------------------------------------

WINGS = {  # a module each wing must hold, as a witness that the split is the one documented
    "client": ("enqueue", "eval_only", "cancel", "wait", "chain_diff", "worker_view"),
    "daemon": ("worker", "executors", "local", "ray_cluster", "procs", "subreaper", "salvage", "stages"),
    "identity": ("snapshot", "content_store", "code_view", "snapshot_check", "snapshot_lock", "gc"),
    "contract": ("results", "score_checks", "log_metrics", "effective_config", "stage_json", "score_row"),
    "sim": ("world", "session", "seams", "replay", "results", "operating"),
}


def test_client_daemon_sim_identity_contract_are_folders():
    for wing_name, witnesses in WINGS.items():
        folder = ROOT / "opsdctl" / wing_name
        assert (folder / "__init__.py").is_file(), f"opsdctl/{wing_name}/ is not a package"
        missing = [m for m in witnesses if not (folder / f"{m}.py").is_file()]
        assert not missing, f"opsdctl/{wing_name}/ lacks {missing}"
    assert not (ROOT / "opsdctl" / "run").exists(), "opsdctl/run/ is split into client, daemon, identity, contract"
    assert not (ROOT / "opsdctl" / "plan" / "simulate.py").exists(), "the simulator is opsdctl/sim/"


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
        tree = parsed(path)
        top = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "command"]
        assert top == ["command"], f"{path.name}: must define exactly one top-level `command` function"
        assert not defines_commands(tree), f"{path.name}: registers commands itself: {defines_commands(tree)}"
    for path in sorted((ROOT / "opsdctl").rglob("*.py")):
        if path.parent != COMMANDS_DIR and path.name != "main.py":
            assert not defines_commands(parsed(path)), f"{path}: a command outside cli/commands/"
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
    bad = {str(p.relative_to(ROOT)): module_state(parsed(p))
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
        for node in parsed(path).body:
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            heavy[path.name] = heavy.get(path.name, []) + [n for n in names if not light(n)]
    assert not {k: v for k, v in heavy.items() if v}, {k: v for k, v in heavy.items() if v}


def test_pages_and_commands_share_documents_not_each_other():
    """One document per page (status, compare, variant, chain) in opsdctl/cli/documents/: the
    command renders it with rich, the dashboard with HTML. The dashboard imports no command
    module, and a document imports neither a command nor the dashboard."""
    g = graph("opsdctl")
    bad = sorted(f"{m} imports {x}" for m, deps in g.items() for x in deps
                 if (m.startswith("opsdctl.cli.web") and x.startswith("opsdctl.cli.commands"))
                 or (m.startswith("opsdctl.cli.documents")
                     and x.startswith(("opsdctl.cli.commands", "opsdctl.cli.web"))))
    assert not bad, bad
    documents = {p.stem for p in (ROOT / "opsdctl" / "cli" / "documents").glob("*.py")} - {"__init__"}
    assert documents >= {"status", "compare", "variant", "chain"}


# --- parameter objects and the two read paths ----------------------------------------------
MAX_POSITIONAL = 8


def long_signatures(tree: ast.Module, skip: frozenset = frozenset()) -> list[str]:
    """Functions taking more than MAX_POSITIONAL positional parameters (self/cls aside): a
    parameter object says what belongs together. `skip`: names exempt (a Typer command's
    parameters are its command line)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name not in skip:
            names = [a.arg for a in node.args.posonlyargs + node.args.args if a.arg not in ("self", "cls")]
            if len(names) > MAX_POSITIONAL:
                out.append(f"line {node.lineno}: {node.name} takes {len(names)}")
    return out


def test_no_function_takes_more_than_eight_positional_parameters():
    bad = {}
    for path in sorted((ROOT / "opsdctl").rglob("*.py")):
        skip = frozenset({"command"}) if path.parent == COMMANDS_DIR else frozenset()
        found = long_signatures(parsed(path), skip)
        if found:
            bad[str(path.relative_to(ROOT))] = found
    assert not bad, bad


def orm_reads(tree: ast.Module) -> list[str]:
    """`with <store>.read() as s` or a `Session(...)`: an ORM read session (the worker's way to read)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                call = item.context_expr
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "read"
                        and not call.args and not call.keywords):
                    out.append(f"line {node.lineno}: {ast.unparse(call)}")
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name == "Session":
                out.append(f"line {node.lineno}: {ast.unparse(node.func)}(...)")
    return sorted(out, key=lambda line: int(line.split()[1].rstrip(":")))


def test_commands_and_clients_read_the_store_through_the_reader():
    """Two ways to read the store, one per side: commands (cli/, client/, export-recipe, code) and
    the documents they build in stats/ (compare, show, chain's run) through the Reader of opsdctl.store.open_read
    (stdlib sqlite3 at the schema's head: status at 10,000 chains stays fast), the worker through
    the ORM session. None of them opens an ORM read session."""
    bad = {}
    # export-recipe's and `code --to`'s reads too (gc, which deletes, reads as the worker does)
    read_only = [ROOT / "opsdctl" / "identity" / "code_export.py"]
    for wing in ("cli", "client", "stats", "recipes"):
        for path in sorted((ROOT / "opsdctl" / wing).rglob("*.py")) + (read_only if wing == "cli" else []):
            found = orm_reads(parsed(path))
            if found:
                bad[str(path.relative_to(ROOT))] = found
    assert not bad, bad


def test_the_signature_and_read_checkers_find_what_they_look_for():
    planted = ast.parse("def f(a, b, c, d, e, f, g, h, i): pass\n"
                        "def ok(self, a, b, c, d, e, f, g, h, *, i): pass\n"
                        "def command(a, b, c, d, e, f, g, h, i): pass\n"
                        "with store.read() as s: pass\n"
                        "with self.store.read() as s, open(p) as f: pass\n"
                        "with store.write() as s: pass\n"
                        "with reader.snapshot(): data = f.read()\n"
                        "with Session(engine) as s: pass\n"
                        "s = orm.Session(engine, expire_on_commit=False)\n")
    assert long_signatures(planted, frozenset({"command"})) == ["line 1: f takes 9"]
    assert len(long_signatures(planted)) == 2
    assert orm_reads(planted) == ["line 4: store.read()", "line 5: self.store.read()", "line 8: Session(...)",
                                  "line 9: orm.Session(...)"]


# --- the store's SQL and writes live in store/ ----------------------------------------------

SQL = re.compile(r"\b(?:SELECT\s.+?\sFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM)\b", re.S)
ORM_PACKAGES = {"sqlalchemy", "sqlmodel"}


def sql_texts(tree: ast.Module) -> list[str]:
    """String literals (f-string parts included) that are SQL statements; docstrings are prose."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [f"line {n.lineno}: {n.value[:40]!r}" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs and SQL.search(n.value)]


def store_writes(tree: ast.Module) -> list[str]:
    """A write transaction (`<store>.write()`), an ORM session, or the ORM and the tables imported."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name == "Session" or (name == "write" and not node.args and not node.keywords):
                out.append(f"line {node.lineno}: {ast.unparse(node.func)}()")
        elif isinstance(node, ast.Import):
            out += [f"line {node.lineno}: import {a.name}" for a in node.names
                    if a.name.split(".")[0] in ORM_PACKAGES or a.name == "opsdctl.store.models"]
        elif isinstance(node, ast.ImportFrom) and node.module and (
                node.module.split(".")[0] in ORM_PACKAGES or node.module == "opsdctl.store.models"):
            out.append(f"line {node.lineno}: from {node.module} import ...")
    return out


def test_sql_text_lives_in_store_only():
    """One place holds the SQL (store/queries.py, and the ORM functions of store/ built on it)."""
    bad = {}
    for path in sorted((ROOT / "opsdctl").rglob("*.py")):
        if path.relative_to(ROOT).parts[1] != "store" and (found := sql_texts(parsed(path))):
            bad[str(path.relative_to(ROOT))] = found
    assert not bad, bad


def test_plan_holds_decisions_only_no_sql_and_no_store_writes():
    """plan/ decides; the store's SQL texts (store/queries.py) and its writes (store/chain_rows.py,
    store/engine.py) are store/'s, which plan/ calls."""
    bad = {}
    for path in sorted((ROOT / "opsdctl" / "plan").rglob("*.py")):
        tree = parsed(path)
        found = sql_texts(tree) + store_writes(tree)
        if found:
            bad[str(path.relative_to(ROOT))] = found
    assert not bad, bad


def test_the_sql_and_write_checkers_find_what_they_look_for():
    planted = ast.parse('"""SELECT a FROM b in a docstring is prose."""\n'
                        'Q = "SELECT chain.id FROM chain WHERE x"\n'
                        'R = f"UPDATE chain SET state = {s}"\n'
                        'T = "select what to run from the queue"\n'
                        "from sqlalchemy import select\n"
                        "import opsdctl.store.models\n"
                        "with store.write() as s: pass\n"
                        "f.write(text)\n")
    assert [x.split(":")[0] for x in sql_texts(planted)] == ["line 2", "line 3"]
    assert store_writes(planted) == ["line 5: from sqlalchemy import ...", "line 6: import opsdctl.store.models",
                                     "line 7: store.write()"]


def constructs(tree: ast.Module, name: str) -> list[str]:
    """Calls of `name(...)` or `x.name(...)`."""
    return [f"line {n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.Call)
            and (n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", None)) == name]


def test_one_module_makes_a_chain_row():
    """New, repeat, re-eval, eval-only and copy: store/chain_rows.py is the one place a `Chain` is
    constructed, so what a queued chain must carry is filled by one rule per kind."""
    home = ROOT / "opsdctl" / "store" / "chain_rows.py"
    found = {str(p.relative_to(ROOT)): constructs(parsed(p), "Chain")
             for p in sorted((ROOT / "opsdctl").rglob("*.py")) if p != home}
    assert not {k: v for k, v in found.items() if v}, "make chains through opsdctl.store.chain_rows"
    assert constructs(parsed(home), "Chain")
    assert constructs(ast.parse("a = Chain(x=1)\nb = models.Chain()\nc = SimChain(1)\n"), "Chain") == ["line 1", "line 2"]


# --- module size ------------------------------------------------------------------------------

MAX_MODULE_LINES = 600
OVERSIZE_ALLOWED = {
    "opsdctl/config.py",  # the config schema: one table of every section and key, exempt for good
}


def test_no_module_over_600_lines():
    """A module a newcomer can read in one sitting; a longer one holds more than one idea."""
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in sorted((ROOT / "opsdctl").rglob("*.py"))}
    over = {p: n for p, n in sizes.items() if n > MAX_MODULE_LINES and p not in OVERSIZE_ALLOWED}
    assert not over, f"split these (over {MAX_MODULE_LINES} lines): {over}"
    stale = {p for p in OVERSIZE_ALLOWED - {"opsdctl/config.py"} if sizes.get(p, 0) <= MAX_MODULE_LINES}
    assert not stale, f"under the limit now: drop them from OVERSIZE_ALLOWED: {sorted(stale)}"
