"""One line, exit 2, the store unchanged, never a traceback.

Each case used to end in a traceback (or worse: a zero-length runs.db silently became a new
store, and another program's SQLite file was given our tables). Most cases call the in-process
CLI entry point; the ones that matter also run the installed console script."""

from __future__ import annotations

import sqlite3

import pytest

from support.queued_workspace import build_template, copy_of

DEEP = "a = " + "[" * 1000 + "]" * 1000 + "\n"


@pytest.fixture(scope="module")
def _template(tmp_path_factory):
    return build_template(tmp_path_factory, "oneline")


@pytest.fixture
def ws(_template, tmp_path):
    return copy_of(_template, tmp_path)


def _store_bytes(ws) -> dict:
    """The store's content: the file and its write-ahead log (-shm is only an index of it)."""
    out = {p.name: p.read_bytes() for p in sorted(ws.root.glob("runs.db*")) if p.name in ("runs.db", "runs.db-wal")}
    return {k: v for k, v in out.items() if v}


def _refused(res, *needles):
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert len(lines) == 1 and "Traceback" not in res.stderr + res.stdout, res.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def test_files_that_are_not_utf8(ws):
    before = _store_bytes(ws)
    (ws.root / "recipes" / "latin.toml").write_bytes('name = "latin"\ndescription = "caf\xe9"\n'.encode("latin-1"))
    _refused(ws.cli("queue", "latin", check=False), "latin.toml: not UTF-8 text (byte 0xe9 at offset 33)")
    good = (ws.root / "opsdctl.toml").read_bytes()
    (ws.root / "opsdctl.toml").write_bytes(good + "# r\xe9sum\xe9\n".encode("latin-1"))
    for command in (["status"], ["queue", "baseline"], ["worker", "--drain"]):
        _refused(ws.cli(*command, check=False), "opsdctl.toml: not UTF-8 text")
    _refused(ws.run("status", check=False), "not UTF-8 text")
    assert _store_bytes(ws) == before


def test_toml_nested_1000_deep(ws):
    before = _store_bytes(ws)
    (ws.root / "recipes" / "deep.toml").write_text('name = "deep"\n[method]\n' + DEEP)
    _refused(ws.cli("queue", "deep", check=False), "deep.toml: invalid TOML: nested too deeply")
    (ws.root / "opsdctl.toml").write_text((ws.root / "opsdctl.toml").read_text() + "[x]\n" + DEEP)
    _refused(ws.run("status", check=False), "opsdctl.toml: invalid TOML: nested too deeply")
    assert _store_bytes(ws) == before


@pytest.mark.parametrize("argv, needle", [
    (["queue", "baseline", "--seed", str(2**70)], "--seed 1180591620717411303424: must be an integer from 0 to 4294967295"),
    (["queue", "baseline", "--seed", "-1"], "--seed -1"),
    (["queue", "baseline", "--priority", str(2**64)], "--priority 18446744073709551616"),
    (["queue", "baseline", "--repeats", str(10**30)], "--repeats 100000000000... (31 digits)"),
    (["cancel", str(2**64)], "CHAIN_ID 18446744073709551616: must be an integer from 1 to 9223372036854775807"),
    (["cancel", "1", str(2**64)], "CHAIN_ID 18446744073709551616"),
    (["requeue", str(2**80)], "CHAIN_ID"),
    (["requeue", "1", "--priority", str(-2**40)], "--priority -1099511627776"),
    (["logs", str(2**70)], "CHAIN_ID"),
    (["diff", "1", str(2**70)], "CHAIN_ID"),
    (["wait", str(2**70)], "CHAIN_ID"),
    (["status", "--recent", str(2**70)], "--recent"),
])
def test_integers_beyond_64_bits_on_the_command_line(ws, argv, needle):
    before = _store_bytes(ws), ws.counts()
    _refused(ws.cli(*argv, check=False), needle)
    assert (_store_bytes(ws), ws.counts()) == before


def test_integers_beyond_64_bits_through_the_console_script(ws):
    before = _store_bytes(ws)
    _refused(ws.run("queue", "baseline", "--seed", str(10**40), check=False), "--seed")
    _refused(ws.run("cancel", str(10**40), check=False), "CHAIN_ID")
    assert _store_bytes(ws) == before


def test_a_store_damaged_after_it_was_opened(ws):
    # a missing table: the schema revision is right, so the store opens, and fails on use
    con = sqlite3.connect(ws.db)
    con.execute("drop table score")
    con.commit()
    con.close()
    before = _store_bytes(ws)
    for argv in (["compare"], ["show", "baseline"]):
        _refused(ws.cli(*argv, check=False), "no such table: score", "damaged or was changed by another program")
    _refused(ws.run("compare", check=False), "no such table: score")
    assert _store_bytes(ws) == before


def test_a_store_with_malformed_pages(ws):
    con = sqlite3.connect(ws.db)
    con.execute("pragma wal_checkpoint(truncate)")
    con.execute("pragma journal_mode=delete")
    con.close()
    data = bytearray(ws.db.read_bytes())
    page = 4096
    for p in range(2, len(data) // page):  # keep the header page: it opens, then queries fail
        data[p * page:(p + 1) * page] = b"\xa5" * page
    ws.db.write_bytes(bytes(data))
    before = _store_bytes(ws)
    line = _refused(ws.run("status", check=False), "store")
    assert "malformed" in line or "not a database" in line, line
    assert _store_bytes(ws) == before


def test_export_recipe_to_an_existing_directory(ws):
    (ws.root / "out").mkdir()
    _refused(ws.cli("export-recipe", "baseline", "--force", "-o", "out", check=False), "-o out: is a directory")
    _refused(ws.cli("export-recipe", "baseline", "--force", "--method-defaults", "out", check=False),
             "--method-defaults out: is a directory")
    assert list((ws.root / "out").iterdir()) == []


def test_names_with_a_newline_give_one_line(ws):
    before = _store_bytes(ws)
    ws.recipe("nl", 'name = "base\\nline"\n')
    _refused(ws.cli("queue", "nl", check=False), "name = 'base\\nline'")
    ws.recipe("trailing", 'name = "trailing\\n"\n')  # `$` used to let a trailing newline through
    _refused(ws.cli("queue", "trailing", check=False), "name = 'trailing\\n'")
    odd = ws.root / "recipes" / "two\nlines.toml"
    odd.write_text('name = "ok"\n[hparams]\nlora_r = 999\n')
    _refused(ws.cli("queue", str(odd), check=False), "two\\nlines.toml", "lora_r = 999")
    text = (ws.root / "opsdctl.toml").read_text()
    (ws.root / "opsdctl.toml").write_text('"runs\\ndir" = "x"\n' + text)
    _refused(ws.run("status", check=False), "runs\\ndir: unknown key")
    assert _store_bytes(ws) == before


def test_a_zero_length_store_is_refused_not_made_new(ws):
    for p in ws.root.glob("runs.db*"):
        p.unlink()
    ws.db.write_bytes(b"")
    for argv in (["status"], ["queue", "baseline"]):
        _refused(ws.cli(*argv, check=False), "runs.db: the file is empty (0 bytes), not an opsdctl store")
    _refused(ws.run("worker", "--drain", check=False), "the file is empty")
    assert ws.db.stat().st_size == 0 and not list(ws.root.glob("runs.db-*"))
    ws.db.unlink()  # once deleted, a new store starts as before
    assert ws.cli("queue", "baseline").returncode == 0


def test_another_programs_sqlite_file_is_refused_untouched(ws):
    other = ws.root / "notes.db"
    con = sqlite3.connect(other)
    con.execute("create table note (id integer primary key, text text)")
    con.execute("insert into note (text) values ('keep me')")
    con.commit()
    con.close()
    before = other.read_bytes()
    ws.write_config(ws.root.joinpath("opsdctl.toml").read_text().replace("sqlite:///runs.db", "sqlite:///notes.db"))
    for argv in (["status"], ["queue", "baseline"]):
        _refused(ws.cli(*argv, check=False), "notes.db", "holds another program's tables (note)")
    assert other.read_bytes() == before
    con = sqlite3.connect(other)
    assert [r[0] for r in con.execute("select name from sqlite_master where type = 'table'")] == ["note"]
    con.close()
