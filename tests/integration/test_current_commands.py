"""Stage commands are frozen when a chain is queued. After a user fixes a broken command in
opsdctl.toml: the failure line says how to run the fixed one, `requeue N [--eval-only]
--current-commands` takes it (same checkpoint, same code snapshot), `status` shows which queued
chains still run other settings than the file holds, and the worker's note about it is true."""

from __future__ import annotations

import sys

from conftest import FAKE_EVAL, default_config
from opsdctl.config import load_config
from opsdctl.run.worker import Worker
from opsdctl.store.engine import open_store

GOOD_EVAL = f"{sys.executable} {FAKE_EVAL} {{checkpoint}} --output-dir {{stage_dir}}"


def test_a_fixed_eval_command_is_taken_by_requeue_current_commands(ws):
    ws.write_config(default_config(eval="no-such-evaluator {checkpoint}"))
    ws.cli("queue", "baseline")
    ws.cli("worker", "--drain")
    reason = ws.sql("select reason from chain where id = 1")[0][0]
    assert ws.state(1) == "failed" and "was not found (exit 127)" in reason, reason
    assert "`opsdctl requeue 1 --eval-only --current-commands`" in reason, reason

    ws.write_config(default_config(eval=GOOD_EVAL))  # the user fixes the command
    ws.cli("requeue", "1", "--eval-only")  # without the flag: the frozen (broken) command again
    ws.cli("worker", "--drain")
    reason = ws.sql("select reason from chain where id = 2")[0][0]
    assert ws.state(2) == "failed" and "opsdctl.toml has another [stages.eval] command" in reason, reason
    assert "`opsdctl requeue 2 --eval-only --current-commands`" in reason

    ws.cli("requeue", "2", "--eval-only", "--current-commands")
    ws.cli("worker", "--drain")
    assert ws.state(3) == "succeeded"
    assert ws.sql("select name from stage where chain_id = 3") == [("eval",)]  # not trained again
    (snap1, hash1), (snap3, hash3) = ws.sql("select snapshot_id, commands_hash from chain where id in (1, 3) order by id")
    assert snap1 == snap3 and hash1 != hash3  # one code state; the commands it ran are told apart


def test_requeue_current_commands_of_a_whole_chain(ws):
    ws.write_config(default_config(train="no-such-trainer"))
    ws.cli("queue", "baseline")
    ws.cli("worker", "--drain")
    assert "`opsdctl requeue 1 --current-commands`" in ws.sql("select reason from chain where id = 1")[0][0]
    ws.write_config(default_config())
    ws.cli("requeue", "1", "--current-commands")
    ws.cli("worker", "--drain")
    assert ws.state(2) == "succeeded"


def test_status_and_the_worker_note_compare_with_the_file_now(ws):
    """The worker loaded the old file; the user edited it and queued chain 2. Chain 1 runs its
    frozen (old) command, which the file no longer holds: said. Chain 2 runs the file's: nothing
    to say (the old worker compared with the file it loaded, and said it of chain 2)."""
    ws.cli("queue", "baseline")  # chain 1: the old eval command
    cfg_at_worker_start = load_config(ws.root / "opsdctl.toml")
    ws.write_config(default_config(eval=f"FAKE_PROBLEMS=5 {GOOD_EVAL}"))
    ws.cli("queue", "baseline")  # chain 2: the new one

    doc = ws.status()
    differ = {c["chain_id"]: c["stage_settings_differ"] for c in doc["chains"]}
    assert differ == {1: ["[stages.eval] command"], 2: []}
    text = ws.cli("status").stdout
    assert "chain 1: runs the stage settings frozen when queued" in text and "[stages.eval] command" in text
    assert "chain 2:" not in text

    lines: list[str] = []
    Worker(cfg_at_worker_start, open_store(cfg_at_worker_start.db), drain=True, report=lines.append).run()
    notes = [l for l in lines if "frozen when it was queued" in l]
    assert len(notes) == 1 and notes[0].startswith("chain 1:") and "[stages.eval] command" in notes[0], lines
    assert ws.state(1) == ws.state(2) == "succeeded"
