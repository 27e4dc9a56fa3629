"""Fuzz: a few hundred generated malformed recipes and configs.

Typos of every key, wrong types, non-finite and absurd numbers, integers beyond 64 bits, budget
knobs, shell syntax and control characters in names, files that are not UTF-8, TOML nested
1000 deep or cut short. Each must give exit 2, one line on stderr, no traceback, the store
byte for byte unchanged, and no command executed (the stage commands would leave a marker;
names carrying `$(touch ...)` would leave another).

The cases are generated from the schema (opsdctl.config.SCHEMA, opsdctl.recipes.knobs) with a
fixed seed, so a failure names a reproducible case. They run through the CLI entry point in
this process (conftest's Workspace.cli), with a sample through the installed console script:
the whole file takes seconds, not minutes.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import textwrap

import pytest

from conftest import REPO, Workspace
from opsdctl.config import REFERENCE_SCHEMA, SCHEMA
from opsdctl.recipes import knobs

SEED = 20240614
MARKER = "EXECUTED-MARKER"
PWNED = "PWNED-MARKER"
RECIPE_CASES = 250
CONFIG_CASES = 250
SUBPROCESS_SAMPLE = 6  # of each kind, through the console script

# Values invalid for every key of their kind (see the generators for the exceptions).
NON_FINITE = ["nan", "inf", "-inf", "+inf", "-nan"]
HUGE = [str(2**64), str(-(2**64)), "9" * 30, "1e300", "-1e300"]
WRONG_SHAPES = ["1979-05-27T07:32:00Z", "[{ a = 1 }]", "{ x = { y = nan } }", "[[1], [2]]"]
SHELL_NAMES = ["$(touch PWNED-MARKER)", "`touch PWNED-MARKER`", "a; touch PWNED-MARKER", "a && touch PWNED-MARKER",
               "a | tee PWNED-MARKER", "a\\ntouch PWNED-MARKER", "a > PWNED-MARKER", "' OR 1=1 --", "../../etc/passwd",
               "-rf", "a b", "", " ", "x" * 65, "é-accent", "tab\\there", "nul\\u0000x", "esc\\u001b[31m"]
DEEP = "[" * 1000 + "]" * 1000


def _typos(word: str, rng: random.Random, known) -> list[str]:
    """A few misspellings of `word` that are not themselves a known key."""
    out = []
    if len(word) > 2:
        i = rng.randrange(len(word) - 1)
        out.append(word[:i] + word[i + 1] + word[i] + word[i + 2:])  # swap two letters
        out.append(word[:i] + word[i + 1:])  # drop one
    out.append(word + "s")
    out.append(word.upper())
    out.append(word.replace("_", "-") if "_" in word else word + "_")
    return [t for t in dict.fromkeys(out) if t not in known and t]


def _toml_str(text: str) -> str:
    return json.dumps(text).replace("\\\\n", "\\n").replace("\\\\t", "\\t").replace("\\\\u", "\\u")


# --- recipes -----------------------------------------------------------------------------------


def _recipe_cases(rng: random.Random) -> list[tuple[str, bytes]]:
    head = 'name = "{name}"\nextends = "baseline"\n'
    cases: list[tuple[str, str | bytes]] = []
    known = set(knobs.HPARAMS) | set(knobs.METHOD_KNOBS)
    for section, table in (("hparams", knobs.HPARAMS), ("method", knobs.METHOD_KNOBS)):
        for key, knob in table.items():
            bad = list(WRONG_SHAPES) + ['"1e-5"' if knob.kind is not str else '"no-such-choice"']
            if knob.kind is bool:
                bad += ["1", "0", '"true"', "nan"]
            elif knob.kind is str:
                bad += ["1", "true", "nan"]
            else:
                bad += NON_FINITE
                if knob.kind is int:  # beyond any int knob's range; a float knob without a bound takes them
                    bad += ["1.5", "true", "9" * 30, str(2**64), str(-(2**64))]
                if knob.hi is not None:
                    bad += ["1e300", str(10**30)]
                if knob.lo is not None:
                    bad += ["-1e300", str(-(10**30))]
            for value in bad:
                cases.append((f"{section}.{key}={value}", head + f"[{section}]\n{key} = {value}\n"))
            for typo in _typos(key, rng, known | knobs.BUDGET_KNOBS):
                cases.append((f"typo {section}.{typo}", head + f"[{section}]\n{typo} = 1\n"))
    for key in sorted(knobs.BUDGET_KNOBS):
        for where in ("", "[hparams]\n", "[method]\n"):
            cases.append((f"budget knob {where.strip()}{key}", head + f"{where}{key} = 1\n"))
    for name in SHELL_NAMES:
        cases.append((f"name {name!r}", f"name = {_toml_str(name)}\n"))
        cases.append((f"extends {name!r}", f'name = "ok"\nextends = {_toml_str(name)}\n'))
    special = [
        ("not utf-8 comment", (head + "# caf\xe9\n").encode("latin-1")),
        ("not utf-8 string", (head + 'description = "\xff\xfe"\n').encode("latin-1")),
        ("utf-16 file", (head + "[hparams]\nlora_r = 8\n").encode("utf-16")),
        ("deep array in method", head + f"[method]\nclip_mode = {DEEP}\n"),
        ("deep inline table", head + "[hparams]\nlora_r = " + "{a=" * 1000 + "1" + "}" * 1000 + "\n"),
        ("deep dotted table", head + "[" + ".".join(["hparams"] + ["a"] * 1000) + "]\nb = 1\n"),
        ("unclosed header", head + "[hparams\nlora_r = 8\n"),
        ("unclosed string", head + 'description = "never ends\n'),
        ("duplicate key", head + "[hparams]\nlora_r = 8\nlora_r = 16\n"),
        ("two teachers", head + "[hparams]\nuse_ema_teacher = true\nfixed_teacher = true\n"),
        ("unknown top key", head + "colour = 'blue'\n"),
        ("hparams not a table", head + "hparams = 3\n"),
        ("method a list", head + "method = [1, 2]\n"),
        ("name a number", "name = 7\n"),
        ("NUL byte", head.encode() + b"[hparams]\nlora_r = 8\x00\n"),
    ]
    return _sample(rng, special, cases, RECIPE_CASES)


# --- configs -----------------------------------------------------------------------------------


def _base_config() -> str:
    return textwrap.dedent(f"""\
        profile = "tiny"
        db = "sqlite:///runs.db"
        runs_dir = "runs"
        code_dir = "."
        snapshot_code = false

        [budget]

        [gpus]
        devices = []

        [stages.train]
        command = "touch {MARKER}-train"
        checkpoint = "{{stage_dir}}/checkpoint-final"

        [stages.eval]
        command = "touch {MARKER}-eval"

        [baseline]
        variant = "baseline"

        [worker]
        poll_seconds = 0.2
        kill_grace_seconds = 1
        """)


def _with(base: str, section: str, line: str) -> str:
    """`base` with `line` set in [section] (its old line for that key removed)."""
    key = line.split("=")[0].strip()
    lines = base.splitlines(keepends=True)
    if section == "":
        body = [l for l in lines if not (l.split("=")[0].strip() == key and "=" in l and not l.startswith("["))]
        return line + "\n" + "".join(body)
    header = f"[{section}]"
    if header + "\n" not in lines:
        return base + f"\n{header}\n{line}\n"
    start = lines.index(header + "\n")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    kept = [l for l in lines[start + 1:end] if l.split("=")[0].strip() != key]
    return "".join(lines[:start + 1] + [line + "\n"] + kept + lines[end:])


def _config_cases(rng: random.Random) -> list[tuple[str, bytes]]:
    base = _base_config()
    cases: list[tuple[str, str | bytes]] = []
    sections = [s for s in SCHEMA if s]
    for section, keys in SCHEMA.items():
        for key in keys:
            bad = NON_FINITE + HUGE + WRONG_SHAPES
            if key == "deadline":
                bad = [v for v in bad if not v.startswith("1979")] + ['"soon"', '"2025-13-45T99:00:00"']
            for value in bad:
                cases.append((f"[{section}] {key} = {value}", _with(base, section, f"{key} = {value}")))
            for typo in _typos(key, rng, set(keys)):
                cases.append((f"[{section}] typo {typo}", _with(base, section, f"{typo} = 1")))
        if section:
            for typo in _typos(section.split(".")[-1], rng, set(sections) | {"train", "eval"}):
                name = f"stages.{typo}" if section.startswith("stages.") else typo
                if name not in SCHEMA:
                    cases.append((f"section [{name}]", base + f"\n[{name}]\nx = 1\n"))
    for key in REFERENCE_SCHEMA:
        for value in NON_FINITE + HUGE + ['"1"']:
            ref = {"mean": "54.22", "sd": "1.48", "n": "5", key: value}
            cases.append((f"reference.{key} = {value}",
                          _with(base, "baseline", "reference = { " + ", ".join(f"{k} = {v}" for k, v in ref.items()) + " }")))
    for name in SHELL_NAMES:
        if not name.isidentifier():  # a long plain identifier is a fine knob name
            cases.append((f"extra knob {name!r}", _with(base, "", f"extra_method_knobs = [{_toml_str(name)}]")))
        cases.append((f"key {name!r}", _with(base, "worker", f"{_toml_str(name)} = 1")))
    for template in ("touch {sed}", "touch {", "touch }", "touch {checkpoint}", "{0}", "{a.b}", "{seed}}", "{ seed }"):
        cases.append((f"train command {template!r}", _with(base, "stages.train", f"command = {_toml_str(template)}")))
    special = [
        ("metrics: regex nested 1000 deep", _with(base, "stages.train.metrics", "kl = '" + "(" * 1000 + "a" + ")" * 1000 + "'")),
        ("metrics: two groups", _with(base, "stages.train.metrics", "kl = '(a)(b)'")),
        ("metrics: bad regex", _with(base, "stages.train.metrics", "kl = '(['")),
        ("not utf-8", (base + "# r\xe9sum\xe9\n").encode("latin-1")),
        ("utf-16", base.encode("utf-16")),
        ("deep array", base + f"\n[x]\na = {DEEP}\n"),
        ("deep inline table", _with(base, "worker", "poll_seconds = " + "{a=" * 1000 + "1" + "}" * 1000)),
        ("unclosed header", base + "\n[budget\n"),
        ("duplicate table", base + "\n[worker]\npoll_seconds = 1\n"),
        ("two budgets", _with(_with(base, "budget", "hours = 6"), "budget", "deadline = 2030-01-01T00:00:00Z")),
        ("db url", _with(base, "", 'db = "not a url"')),
        ("db memory", _with(base, "", 'db = "sqlite://"')),
        ("profile", _with(base, "", 'profile = "$(touch PWNED-MARKER)"')),
        ("stages a string", base.replace("[stages.train]", "stages = 1\n[stages.train]", 1)),
        ("NUL byte", base.encode() + b"\n[worker]\x00\n"),
    ]
    return _sample(rng, special, cases, CONFIG_CASES)


def _sample(rng: random.Random, special: list, generated: list, n: int) -> list[tuple[str, bytes]]:
    """Every hand-written case, and a fixed-seed sample of the generated ones (all of them pass
    too: raise RECIPE_CASES / CONFIG_CASES to run the ~600 + ~950)."""
    cases = special + rng.sample(generated, min(len(generated), n - len(special)))
    return [(label, body if isinstance(body, bytes) else body.encode()) for label, body in cases]


# --- the workspace and the checks ----------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_ws(tmp_path_factory):
    """A workspace whose stage commands would leave markers, with a store holding one finished
    (cancelled) chain: a worker started with a good config would run nothing."""
    root = tmp_path_factory.mktemp("fuzz") / "ws"
    root.mkdir()
    shutil.copytree(REPO / "recipes", root / "recipes")
    ws = Workspace(root)
    ws.write_config(_base_config())
    ws.cli("queue", "baseline")
    ws.cli("cancel", "1")
    return ws


def _snapshot(ws) -> dict:
    """The store's every row (a dump: SQLite may move its write-ahead log into the file at any
    open, which changes bytes, not content) and every other file byte for byte, but the config
    and the recipe under test."""
    import sqlite3

    con = sqlite3.connect(ws.db)
    try:
        out = {"store": "\n".join(con.iterdump())}
    finally:
        con.close()
    for p in sorted(ws.root.rglob("*")):
        if p.is_file() and p.name not in ("opsdctl.toml", "fuzz.toml") and not p.name.startswith("runs.db"):
            out[str(p.relative_to(ws.root))] = p.read_bytes()
    return out


def _check_refused(res, label):
    err_lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, f"{label}: exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    assert len(err_lines) == 1 and err_lines[0].startswith("error: "), f"{label}: {res.stderr!r}"
    assert "Traceback" not in res.stdout + res.stderr, label


def _no_command_ran(ws):
    assert not [p for p in ws.root.rglob("*") if p.name.startswith((MARKER, PWNED))]


def test_generated_bad_recipes_are_refused(fuzz_ws):
    ws = fuzz_ws
    cases = _recipe_cases(random.Random(SEED))
    assert len(cases) == RECIPE_CASES
    before = _snapshot(ws)
    path = ws.root / "recipes" / "fuzz.toml"
    for label, body in cases:
        path.write_bytes(body.replace(b"{name}", b"fuzz"))
        _check_refused(ws.cli("queue", "fuzz", check=False), label)
    for label, body in cases[:SUBPROCESS_SAMPLE]:
        path.write_bytes(body.replace(b"{name}", b"fuzz"))
        _check_refused(ws.run("queue", "fuzz", check=False), label)
    path.unlink()
    assert _snapshot(ws) == before
    assert ws.cli("worker", "--drain").returncode == 0  # nothing was queued by any case
    _no_command_ran(ws)


def test_generated_bad_configs_are_refused(fuzz_ws):
    ws = fuzz_ws
    cases = _config_cases(random.Random(SEED + 1))
    assert len(cases) == CONFIG_CASES
    config = ws.root / "opsdctl.toml"
    good = config.read_bytes()
    before = _snapshot(ws)
    for i, (label, body) in enumerate(cases):
        config.write_bytes(body)
        commands = (["queue", "baseline"], ["worker", "--drain"], ["status"])
        for command in commands if i % 3 == 0 else commands[:2]:
            _check_refused(ws.cli(*command, check=False), f"{label} ({' '.join(command)})")
    for label, body in cases[:SUBPROCESS_SAMPLE]:
        config.write_bytes(body)
        _check_refused(ws.run("worker", "--drain", check=False), label)
    config.write_bytes(good)
    assert _snapshot(ws) == before
    _no_command_ran(ws)


def test_the_generators_only_make_bad_input():
    """Guard the guard: each class has many cases, and the good base config and recipe pass."""
    recipes = _recipe_cases(random.Random(SEED))
    configs = _config_cases(random.Random(SEED + 1))
    assert len({label for label, _ in recipes}) == len(recipes) and len({label for label, _ in configs}) == len(configs)
    for word in ("typo", "nan", "inf", str(2**64), "PWNED", "utf", "deep"):
        assert any(word in label for label, _ in recipes + configs), word
    assert re.search(r"\[worker\]", _base_config())
