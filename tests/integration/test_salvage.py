"""Recovery salvages finished work: a chain whose worker died after its train
left a complete checkpoint is re-queued as an eval-only chain of it; one whose evaluation had
finished succeeds with that score. Real workers, killed with SIGKILL at the worst moments."""

from __future__ import annotations

import signal
import sys

from conftest import FAKE_EVAL, FAKE_TRAIN, default_config, stop_process, wait_for

TRAIN = f"{sys.executable} {FAKE_TRAIN} --recipe {{recipe_json}} --seed {{seed}} --output-dir {{stage_dir}}"
EVAL = f"{sys.executable} {FAKE_EVAL} {{checkpoint}} --output-dir {{stage_dir}}"
KILL_WORKER = " && kill -9 $PPID"  # the stage's shell is the worker's child: the worker dies right after


def _rows(ws):
    return ws.sql("select id, state, requeued_from, eval_only, checkpoint, trained_by from chain order by id")


def test_killed_during_eval_resumes_from_the_trained_checkpoint(ws):
    ws.env = {"FAKE_HANG": "1"}  # the first eval hangs; the worker is killed during it
    ws.cli("queue", "baseline")
    worker = ws.popen("worker")
    try:
        wait_for(lambda: ws.sql("select 1 from stage where chain_id = 1 and name = 'eval' and pid is not null"),
                 timeout=60, what="the eval stage")
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
    finally:
        if worker.poll() is None:
            stop_process(worker)
    ws.env = {}
    res = ws.run("worker", "--drain")
    ckpt = str(ws.runs / "1" / "train" / "checkpoint-final")
    assert _rows(ws) == [(1, "interrupted", None, 0, None, None), (2, "succeeded", 1, 1, ckpt, 1)]
    assert ws.sql("select count(*) from stage where name = 'train'") == [(1,)]  # trained once
    assert f"salvaged its checkpoint {ckpt} (its train stage had succeeded)" in res.stdout
    show = {r["chain_id"]: r for r in ws.cli_json("show", "baseline")["runs"]}
    assert show[2]["score"] is not None and show[2]["train"]["final_loss"] == -0.0079  # its training, shown


def test_worker_dead_right_after_a_user_script_trained(ws):
    """No train_result.json (a user's script): the Trainer's final train_runtime line proves the
    training finished; the checkpoint is used, not trained again."""
    ws.write_config(default_config(train=TRAIN + KILL_WORKER, eval=EVAL))
    ws.env = {"FAKE_NO_FILES": "1"}
    ws.cli("queue", "baseline")
    first = ws.run("worker", "--drain", check=False)
    assert first.returncode == -signal.SIGKILL, first.stdout
    res = ws.run("worker", "--drain")
    ckpt = str(ws.runs / "1" / "train" / "checkpoint-final")
    assert _rows(ws) == [(1, "interrupted", None, 0, None, None), (2, "succeeded", 1, 1, ckpt, 1)]
    assert "the Trainer's final train_runtime line" in res.stdout


def test_killed_mid_training_is_re_run_whole(ws):
    """A checkpoint directory without the end of training is not complete: train again."""
    # stage commands are frozen per chain (the re-queued copy runs chain 1's): the worker's
    # environment decides which run is killed
    kill = 'if [ -n "$KILL_ONCE" ]; then mkdir -p {stage_dir}/checkpoint-final && kill -9 $PPID; exit 137; fi; '
    ws.write_config(default_config(train=kill + TRAIN, eval=EVAL))
    ws.cli("queue", "baseline")
    ws.run("worker", "--drain", check=False, env={"KILL_ONCE": "1"})
    ws.run("worker", "--drain")
    assert _rows(ws)[1][:4] == (2, "succeeded", 1, 0)
    assert ws.sql("select count(*) from stage where name = 'train'") == [(2,)]


def test_worker_dead_right_after_the_eval_finished_keeps_its_score(ws):
    # stage commands are frozen per chain: the worker's environment picks what each run does
    ws.write_config(default_config(
        train=TRAIN, eval=EVAL + ' ${FINAL_ONLY:+--final-only} && if [ -n "$KILL_AFTER_EVAL" ]; then kill -9 $PPID; fi'))
    ws.cli("queue", "baseline", "--repeats", "2")
    ws.run("worker", "--drain", check=False, env={"KILL_AFTER_EVAL": "1"})  # dies after chain 1's eval
    res = ws.run("worker", "--drain", env={"FINAL_ONLY": "1"})  # chain 2: a FINAL line only
    rows = _rows(ws)
    assert rows == [(1, "succeeded", None, 0, None, None), (2, "succeeded", None, 0, None, None)], rows
    assert "salvaged its finished evaluation (result.json" in res.stdout
    reason = ws.sql("select reason from chain where id = 1")[0][0]
    assert "its evaluation had finished (result.json)" in reason
    assert ws.sql("select chain_id, source from score order by chain_id") == [(1, "result.json"), (2, "final-line")]
    assert ws.sql("select state from stage where chain_id = 1 order by id") == [("succeeded",), ("succeeded",)]


def test_a_finished_training_that_contradicts_the_recipe_is_not_salvaged(ws):
    """The worker died before its effective-config check: salvage runs it, and a log that shows
    another learning rate than the recipe's is trained again, not evaluated."""
    # frozen stage commands: the re-queued copy runs chain 1's; the worker's environment decides
    once = 'if [ -n "$KILL_ONCE" ]; then OPSD_LEARNING_RATE=0.001 ' + TRAIN + KILL_WORKER + "; exit 137; fi; "
    ws.write_config(default_config(train=once + TRAIN, eval=EVAL))
    ws.env = {"FAKE_NO_FILES": "1"}
    ws.cli("queue", "baseline")
    ws.run("worker", "--drain", check=False, env={"KILL_ONCE": "1"})
    res = ws.run("worker", "--drain")
    assert _rows(ws)[1][:4] == (2, "succeeded", 1, 0), res.stdout
    assert ws.sql("select count(*) from stage where name = 'train'") == [(2,)]
    assert "salvaged its checkpoint" not in res.stdout
