"""Nothing a user types reaches a shell unquoted, whatever the stage template: a placeholder inside
the template's own quotes, a here-document or an `eval` (where opsdctl's quoting would be undone)
is refused in one line when the config loads, and again when a worker meets such a command frozen
by an older opsdctl; bare placeholders carry names and directories such as `ck$(touch PWNED)`
as inert words. Real CLI, real worker, real subprocess stages, real SQLite store."""

from __future__ import annotations

import json
import shlex
import sqlite3
import sys

import pytest
from conftest import FAKE_EVAL, default_config

ATTACK = "$(touch PWNED)"


def _pwned(root) -> list:
    return list(root.rglob("PWNED"))


@pytest.mark.parametrize("template", [
    f"{sys.executable} {FAKE_EVAL} {{checkpoint}} --output-dir {{stage_dir}} --tag '{{variant}}'",
    f'{sys.executable} {FAKE_EVAL} "{{checkpoint}}" --output-dir {{stage_dir}}',
    f"eval {sys.executable} {FAKE_EVAL} {{checkpoint}} --output-dir {{stage_dir}}",
    f"sh <<EOF\n{sys.executable} {FAKE_EVAL} {{checkpoint}} --output-dir {{stage_dir}}\nEOF",
])
def test_a_quoted_placeholder_is_refused_when_the_config_loads(ws, template):
    ws.write_config(default_config(eval=template))
    proc = ws.cli("queue", "baseline", check=False)
    assert proc.returncode == 2 and "[stages.eval] command" in proc.stderr and "shell code" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not ws.db.exists() or ws.counts().get("chain", 0) == 0


def test_bare_placeholders_keep_a_hostile_directory_name_inert(ws, tmp_path):
    ws.cli("queue", "baseline")
    ws.run("worker", "--drain")
    hostile = tmp_path / f"ck{ATTACK}"
    (ws.runs / "1" / "train" / "checkpoint-final").rename(hostile)
    proc = ws.cli("queue", "--eval-only", hostile, "--name", f"q{ATTACK}", check=False)
    assert proc.returncode == 2 and "--name" in proc.stderr  # a name is a plain word
    ws.cli("queue", "--eval-only", hostile, "--name", "mine")
    ws.run("worker", "--drain")
    assert ws.state(2) == "succeeded"
    command = ws.sql("select command from stage where chain_id = 2")[0][0]
    assert shlex.quote(str(hostile)) in command  # the eval got the path as one inert word
    assert _pwned(tmp_path) == []


def test_a_quoted_command_frozen_by_an_older_opsdctl_fails_its_chain_in_one_line(ws, tmp_path):
    ws.cli("queue", "baseline")
    ws.run("worker", "--drain")
    hostile = tmp_path / f"ck{ATTACK}"
    (ws.runs / "1" / "train" / "checkpoint-final").rename(hostile)
    ws.cli("queue", "--eval-only", hostile, "--name", "mine")
    spec = json.loads(ws.sql("select stage_spec from chain where id = 2")[0][0])
    spec["eval"]["command"] = f"{sys.executable} {FAKE_EVAL} '{{checkpoint}}' --output-dir {{stage_dir}}"
    con = sqlite3.connect(ws.db)
    con.execute("update chain set stage_spec = ? where id = 2", (json.dumps(spec),))
    con.commit()
    con.close()
    worker = ws.run("worker", "--drain")
    assert ws.state(2) == "failed"
    reason = ws.status()["chains"][0]["reason"]
    assert "eval not started" in reason and "'...' quotes" in reason
    assert "Traceback" not in worker.stdout + worker.stderr
    assert _pwned(tmp_path) == []
