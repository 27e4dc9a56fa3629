"""Stage processes for real: every placeholder reaches a shell quoted, and stop_stage signals only
the stage's own processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from opsdctl.run import procs, stages


# --- templates and the stage environment -------------------------------------------------


def test_render_quotes_every_placeholder():
    nasty = "a b'c\"$HOME;rm -rf x`id`"
    cmd = stages.render("printf '%s\\n' {stage_dir} {seed} ${HOME} {{lit}}", {"stage_dir": nasty, "seed": 3})
    out = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, env={"HOME": "/h"}).stdout
    assert out.splitlines() == [nasty, "3", "/h", "{lit}"]
    assert stages.render("{stage_dir}/ckpt", {"stage_dir": "/a b"}, quote=False) == "/a b/ckpt"


# --- process ownership --------------------------------------------------------------------


def _spawn(token: str | None, escape_child: bool = False) -> psutil.Popen:
    env = dict(os.environ)
    env.pop(stages.ENV_STAGE_TOKEN, None)
    if token:
        env[stages.ENV_STAGE_TOKEN] = token
    code = "import time; time.sleep(60)"
    if escape_child:  # a child that leaves the group (its own session) but keeps the environment
        code = ("import os, subprocess, sys, time; "
                "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True); "
                "time.sleep(60)")
    return psutil.Popen([sys.executable, "-c", code], env=env, start_new_session=True)


def test_stop_stage_never_touches_unproven_processes():
    foreign = _spawn(token=None)
    try:
        # Right pgid, but the start time does not match (pid reuse) and there is no token.
        ident = procs.StageIdentity(pgid=foreign.pid, pid=foreign.pid, create_time=foreign.create_time() - 100, token="mine")
        report = procs.stop_stage(ident, grace=0.5)
        assert report.found == 0 and report.unverified_group and foreign.is_running()
        assert not procs.leader_is_ours(ident)
        assert procs.leader_is_ours(procs.StageIdentity(foreign.pid, foreign.pid, foreign.create_time(), ""))
    finally:
        foreign.kill()
        foreign.wait()


def test_stop_stage_kills_group_and_escaped_token_carriers():
    token = f"tok-{os.getpid()}-{time.time()}"
    leader = _spawn(token=token, escape_child=True)
    try:
        def escaped():
            return [p for p in psutil.process_iter() if p.pid != leader.pid and procs._has_token(p, token)]

        deadline = time.monotonic() + 20
        while not escaped() and time.monotonic() < deadline:
            time.sleep(0.05)
        (child,) = escaped()
        assert os.getpgid(child.pid) != leader.pid  # it left the group
        ident = procs.StageIdentity(pgid=leader.pid, pid=leader.pid, create_time=leader.create_time(), token=token)
        report = procs.stop_stage(ident, grace=2, reap=lambda: leader.poll())
        assert report.found == 2 and report.survivors == []
        assert leader.poll() == -signal.SIGTERM
        child.wait(timeout=5)
        assert not child.is_running()
    finally:
        for p in psutil.process_iter():
            if procs._has_token(p, token):
                p.kill()
        if leader.poll() is None:
            leader.kill()
