"""What a stage prints or writes cannot wedge or bloat the worker.

- A deeply nested result.json (`'[' * 200000`) crashed the worker with a RecursionError, left the
  chain `running`, and crashed every restart again in salvage: now it fails its chain in one line.
- A huge log was read whole after the stage (96 MiB: 388 MiB RSS, 61 s): now only tail windows are
  read, lines are cut, and a worker killed while reading a finished train stage's output leaves
  salvage enough to resume at the eval, never training again.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

from conftest import STAGES, clean_env, default_config, opsdctl_argv, wait_for

NESTED_EVAL = textwrap.dedent("""\
    import os, sys, time
    out = sys.argv[1]
    with open(os.path.join(out, "result.json"), "w") as f:
        f.write("[" * 200000 + "]" * 200000)
    if len(sys.argv) > 2 and not os.path.exists(sys.argv[2]):
        open(sys.argv[2], "w").close()
        time.sleep(120)  # the first time: the test kills the worker here
""")


def _one_line(text: str) -> bool:
    return "\n" not in text.strip()


def test_a_nested_result_json_fails_its_chain_in_one_line(ws):
    script = ws.root / "nested_eval.py"
    script.write_text(NESTED_EVAL)
    ws.write_config(default_config(eval=f"{sys.executable} {script} {{stage_dir}}"))
    ws.cli("queue", "baseline")
    res = ws.run("worker", "--drain", timeout=120)
    assert "Traceback" not in res.stdout + res.stderr
    state, reason = ws.sql("select state, reason from chain where id = 1")[0]
    assert state == "failed" and "nested deeper than" in reason and _one_line(reason), reason
    assert ws.sql("select count(*) from chain")[0][0] == 1


def test_salvage_of_a_nested_result_does_not_crash_or_loop(ws):
    """The worker dies while the eval that wrote the nested file runs: the next worker recovers
    the chain (its checkpoint is complete: evaluate again, do not train), and the re-run's bad
    result fails that chain in one line; the queue goes on."""
    script = ws.root / "nested_eval.py"
    script.write_text(NESTED_EVAL)
    marker = ws.root / "first-time"
    ws.write_config(default_config(eval=f"{sys.executable} {script} {{stage_dir}} {marker}"))
    ws.cli("queue", "baseline", "--repeats", "2")
    worker = ws.popen("worker", "--drain")
    try:
        wait_for(marker.exists, timeout=60, what="the first eval to write its nested result")
        worker.kill()
        worker.wait(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert ws.state(1) == "running"
    res = ws.run("worker", "--drain", timeout=180)
    assert "Traceback" not in res.stdout + res.stderr, res.stdout + res.stderr
    rows = {r[0]: r[1:] for r in ws.sql("select id, state, eval_only, trained_by, reason from chain order by id")}
    assert rows[1][0] == "interrupted"
    fresh = next(i for i, r in rows.items() if r[2] == 1)  # the eval-only re-run of chain 1's checkpoint
    assert rows[fresh][0] == "failed" and "nested deeper than" in rows[fresh][3] and _one_line(rows[fresh][3])
    assert not ws.sql("select id from stage where chain_id = ? and name = 'train'", fresh)  # never trained again
    assert rows[2][0] == "failed"  # the other chain ran too (its eval writes the same file)


# --- huge output --------------------------------------------------------------------------

HUGE_TRAIN = STAGES / "huge_log_train.py"

WRAPPER = "import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); " \
          "print('maxrss_kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)"


def test_a_huge_log_is_read_in_bounded_windows(ws):
    """A 160 MiB train log: the chain runs to its end in seconds with the worker's memory bounded
    (the old worker read the whole log, at about 4 bytes of memory per byte of log)."""
    ws.write_config(default_config(train=f"{sys.executable} {HUGE_TRAIN} {{stage_dir}} 160"))
    ws.cli("queue", "baseline")
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-c", WRAPPER, *opsdctl_argv(), "worker", "--drain"], cwd=ws.root,
                         env=clean_env(), capture_output=True, text=True, timeout=300)
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stdout + res.stderr
    assert ws.state(1) == "succeeded", ws.sql("select reason from chain")
    maxrss_mib = int(res.stdout.rsplit("maxrss_kib", 1)[1].split()[0]) / 1024
    assert maxrss_mib < 300, f"the worker peaked at {maxrss_mib:.0f} MiB for a 160 MiB log"
    assert took < 90, f"{took:.0f}s"


KILL_AT_RELEASE = textwrap.dedent("""\
    import os, signal, sys
    sys.path.insert(0, sys.argv[1])  # the tests' gates.py
    from gates import DefaultGate
    from opsdctl.config import load_config
    from opsdctl.run.worker import Worker
    from opsdctl.store.engine import open_store

    class DiesAfterTrain(DefaultGate):
        # Called once the train stage has exited, before its output is read: a SIGKILL here is a
        # worker killed mid-parse, deterministically.
        def released(self, chain, stage, pids):
            if stage == "train":
                os.kill(os.getpid(), signal.SIGKILL)
            return super().released(chain, stage, pids)

    cfg = load_config("opsdctl.toml")
    Worker(cfg, open_store(cfg.db), drain=True, gate=DiesAfterTrain(())).run()
""")


def test_a_worker_killed_while_reading_a_finished_train_resumes_at_eval(ws):
    """An external train script (no train_result.json, no train_runtime line) that exited 0 with
    its checkpoint: the next worker evaluates that checkpoint and never trains again."""
    ws.write_config(default_config(train=f"{sys.executable} {HUGE_TRAIN} {{stage_dir}} 1"))
    ws.cli("queue", "baseline")
    (ws.root / "kill.py").write_text(KILL_AT_RELEASE)
    first = subprocess.run([sys.executable, "kill.py", str(STAGES.parent)], cwd=ws.root, env=clean_env(), capture_output=True, text=True,
                           timeout=120)
    assert first.returncode == -signal.SIGKILL, first.stdout + first.stderr
    assert ws.state(1) == "running"
    res = ws.run("worker", "--drain", timeout=120)
    rows = ws.sql("select id, state, eval_only, trained_by from chain order by id")
    assert rows == [(1, "interrupted", 0, None), (2, "succeeded", 1, 1)], rows + [res.stdout]
    assert "train stage had exited 0" in res.stdout
    assert ws.sql("select name from stage where chain_id = 2") == [("eval",)]
