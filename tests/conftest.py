"""Shared fixtures for the control-plane tests: a workspace with an opsdctl.toml whose stages
are the emulator scripts under tests/stages/, and helpers to run the real `opsdctl` CLI in a
subprocess against a real SQLite file in a temporary directory."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
STAGES = Path(__file__).resolve().parent / "stages"
FAKE_TRAIN = STAGES / "fake_train.py"
FAKE_EVAL = STAGES / "fake_eval.py"


def opsdctl_argv() -> list[str]:
    script = Path(sys.executable).parent / "opsdctl"
    return [str(script)] if script.exists() else [sys.executable, "-m", "opsdctl.cli"]


def clean_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPSDCTL_", "OPSD_", "FAKE_"))}
    env["PYTHONUNBUFFERED"] = "1"
    env["COLUMNS"] = "200"
    if extra:
        env.update(extra)
    return env


class Workspace:
    """A directory with opsdctl.toml, recipes/ and a store; runs the CLI inside it."""

    def __init__(self, root: Path):
        self.root = root
        self.db = root / "runs.db"
        self.runs = root / "runs"
        self.env: dict[str, str] = {}

    # --- config / recipes ---------------------------------------------------------------

    def write_config(self, text: str | None = None, **kw) -> Path:
        path = self.root / "opsdctl.toml"
        path.write_text(text if text is not None else default_config(**kw))
        return path

    def recipe(self, name: str, body: str) -> Path:
        path = self.root / "recipes" / f"{name}.toml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(textwrap.dedent(body))
        return path

    # --- running the CLI ----------------------------------------------------------------

    def run(self, *args, check: bool = True, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [*opsdctl_argv(), *map(str, args)], cwd=self.root, env=clean_env({**self.env, **(env or {})}),
            capture_output=True, text=True, timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"opsdctl {' '.join(map(str, args))} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
        return proc

    def cli(self, *args, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
        """The same `opsdctl.cli.main.main` entry point, in this process (no interpreter start-up):
        for the many small calls around the subprocess ones that matter."""
        import contextlib
        import io

        from opsdctl.cli import main as cli
        out, err = io.StringIO(), io.StringIO()
        saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
        os.environ.clear()
        os.environ.update(clean_env({**self.env, **(env or {})}))
        os.chdir(self.root)
        sys.argv = ["opsdctl", *map(str, args)]
        code = 0
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                cli.main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            os.environ.clear()
            os.environ.update(saved_env)
            os.chdir(saved_cwd)
            sys.argv = saved_argv
        proc = subprocess.CompletedProcess(["opsdctl", *map(str, args)], code, out.getvalue(), err.getvalue())
        if check and code != 0:
            raise AssertionError(f"opsdctl {' '.join(map(str, args))} exited {code}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return proc

    def cli_json(self, *args, **kw):
        return json.loads(self.cli(*args, "--json", **kw).stdout)

    def popen(self, *args, env: dict | None = None) -> subprocess.Popen:
        return subprocess.Popen(
            [*opsdctl_argv(), *map(str, args)], cwd=self.root, env=clean_env({**self.env, **(env or {})}),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )

    def json(self, *args, **kw):
        return json.loads(self.run(*args, "--json", **kw).stdout)

    def status(self, *args) -> dict:
        return self.cli_json("status", "--all", *args)

    def chains(self) -> dict[int, dict]:
        return {c["chain_id"]: c for c in self.status()["chains"]}

    # --- looking inside the store -------------------------------------------------------

    def sql(self, query: str, *params):
        con = sqlite3.connect(self.db, timeout=30)
        try:
            return con.execute(query, params).fetchall()
        finally:
            con.close()

    def counts(self) -> dict[str, int]:
        tables = [r[0] for r in self.sql("select name from sqlite_master where type='table'")]
        return {t: self.sql(f"select count(*) from {t}")[0][0] for t in tables}

    def state(self, chain_id: int) -> str:
        return self.sql("select state from chain where id = ?", chain_id)[0][0]


def default_config(
    *,
    train: str | None = None,
    eval: str | None = None,
    checkpoint: str = "{stage_dir}/checkpoint-final",
    snapshot: bool = False,
    extra: str = "",
    grace: float = 2,
    budget: str = "",
) -> str:
    py = sys.executable
    train = train or f"{py} {FAKE_TRAIN} --recipe {{recipe_json}} --seed {{seed}} --output-dir {{stage_dir}}"
    eval = eval or f"{py} {FAKE_EVAL} {{checkpoint}} --output-dir {{stage_dir}}"
    return textwrap.dedent(
        f"""\
        profile = "tiny"
        db = "sqlite:///runs.db"
        runs_dir = "runs"
        code_dir = "."
        snapshot_code = {'true' if snapshot else 'false'}
        {extra}

        [budget]
        {budget}

        [gpus]
        devices = []

        [stages.train]
        command = {json.dumps(train)}
        checkpoint = {json.dumps(checkpoint)}

        [stages.eval]
        command = {json.dumps(eval)}

        [baseline]
        variant = "baseline"

        [worker]
        poll_seconds = 0.2
        kill_grace_seconds = {grace}
        """
    )


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    shutil.copytree(REPO / "recipes", root / "recipes")
    w = Workspace(root)
    w.write_config()
    return w


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def stage_pids(ws: "Workspace", chain_id: int, stage: str):
    """(leader pid, child pid, token) of a running emulator stage that spawned a child
    (FAKE_CHILD=1), or None until both are recorded."""
    rows = ws.sql("select pid, token from stage where chain_id = ? and name = ?", chain_id, stage)
    child = ws.runs / str(chain_id) / stage / "child.pid"
    if not rows or rows[0][0] is None or not child.is_file() or not child.read_text().strip():
        return None
    return rows[0][0], int(child.read_text()), rows[0][1]


def token_processes(token: str) -> list[int]:
    """Live processes whose environment carries this stage token."""
    import psutil

    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("OPSDCTL_STAGE_TOKEN") == token and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.Error:
            pass
    return out


def stop_process(proc, timeout: float = 60) -> None:
    """SIGTERM a worker started with Popen, then SIGKILL it if it has not exited in time."""
    import signal

    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()


def pid_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


UNIT = REPO / "tests" / "unit"
WORKERS = 2  # CI's cores; the suite is mostly subprocesses and waits


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (pyproject's addopts): two workers for any run with integration tests in it, none
    for the unit loop alone (`python -m pytest tests/unit`), whose cost is CPU: each worker imports
    and collects every unit test again, which took 68 CPU seconds with two workers against 44 in
    one process, and 99 s against 72 s of wall time on the loaded 2-core machine
    (benchmarks/unit_loop.py; DEVELOPERS.md "Tests"). `-n 2` still asks for two."""
    base = Path(config.invocation_params.dir)
    paths = [(base / str(a).split("::")[0]).resolve() for a in config.args]
    if paths and all(p == UNIT or UNIT in p.parents for p in paths):
        return 0
    return WORKERS
