"""Terminal escapes never reach a terminal through opsdctl: a name with control characters
(`--name $'t\\e]0;X\\a\\e[31mred'`, a recipe's name or description, an --eval-only path) is refused
in one line, and what a stage prints (its last log line quoted in a failure reason) reaches
status and the worker log as visible escapes. Real CLI, real worker, real SQLite store."""

from __future__ import annotations

import json
import sys

from conftest import default_config

ESCAPES = "t\x1b]0;X\x07\x1b[31mred"


def _one_clean_line(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text
    assert len(text.strip().splitlines()) == 1, text


def test_names_with_control_characters_are_refused_in_one_line(ws, tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for name in (ESCAPES, "q$(touch PWNED)", "two words"):
        proc = ws.cli("queue", "--eval-only", ckpt, "--name", name, check=False)
        assert proc.returncode == 2 and "--name" in proc.stderr
        _one_clean_line(proc.stderr)
    odd = tmp_path / "ck\x1b[31m"
    odd.mkdir()
    proc = ws.cli("queue", "--eval-only", odd, "--name", "mine", check=False)
    assert proc.returncode == 2 and "control character" in proc.stderr
    _one_clean_line(proc.stderr)

    ws.recipe("escapes", 'name = "t\\u001b]0;X\\u0007\\u001b[31mred"\n[hparams]\nlearning_rate = 1e-5\n')
    ws.recipe("described", 'description = "red \\u001b[31m text"\n[hparams]\nlearning_rate = 1e-5\n')
    for recipe in ("escapes", "described"):
        proc = ws.cli("queue", recipe, check=False)
        assert proc.returncode == 2
        _one_clean_line(proc.stderr)
    listing = ws.cli("recipes", check=False)
    assert listing.returncode == 1 and "\x1b" not in listing.stdout + listing.stderr
    assert ws.counts().get("chain", 0) == 0  # nothing queued


def test_what_a_stage_prints_reaches_status_and_the_worker_log_escaped(ws):
    script = ws.root / "shout.py"
    script.write_text(f"print({ESCAPES!r}, flush=True)\nraise SystemExit(3)\n")
    ws.write_config(default_config(train=f"{sys.executable} {script}"))
    ws.cli("queue", "baseline")
    worker = ws.run("worker", "--drain")
    assert ws.state(1) == "failed"
    assert "\x1b" not in worker.stdout + worker.stderr and "\\x1b[31mred" in worker.stdout
    reason = ws.status()["chains"][0]["reason"]
    assert "\x1b" not in reason and "\\x1b]0;X\\x07" in reason
    text = ws.cli("status", "--all").stdout
    assert "\x1b" not in text and "\x07" not in text
    raw = json.dumps(ws.sql("select reason from stage"))
    assert "\\u001b" not in raw  # the store keeps the escaped form too
