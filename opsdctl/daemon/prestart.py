"""An evaluation started ahead of its turn (`[stages.eval] prestart`; DEVELOPERS.md, "prestart").

While a chain's train stage runs, its eval is started as if granted the GPUs it will get (the
first of the train stage's, as many as the eval takes), holding on a pipe until the go
(eval/hold.py): its interpreter and imports run while training does. It gets the go only if,
once training has passed its checks, the eval's own grant starts it exactly so; otherwise (other
GPUs, other settings, its GPUs went to another chain's stage first, the chain ended) it is
dropped: its pipe is closed (it exits on its own) and its process group stopped. One per chain.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from opsdctl.daemon import procs, stages
from opsdctl.daemon.stage_launch import Launch

NO_GO_EXIT_S = 5.0  # how long an eval held for its go may take to exit on its own at end of file


@dataclass
class Held:
    launch: Launch
    proc: subprocess.Popen
    go_fd: int  # our end of its go pipe: one byte = go; closing it = no go
    ident: procs.StageIdentity
    started: float  # monotonic


class Prestart:
    """The chain's held evaluation, if any."""

    def __init__(self, ctx, chain_id: int):
        self.ctx = ctx
        self.chain_id = chain_id
        self.held: Optional[Held] = None

    @property
    def pid(self) -> Optional[int]:
        return self.held.proc.pid if self.held is not None else None

    def start(self, launch: Launch, code_dir: Path) -> None:
        read_fd, write_fd = os.pipe()
        env = {**launch.env, stages.ENV_GO_FD: str(read_fd)}
        try:
            proc = self.ctx.lineages.start(self.chain_id, lambda: stages.spawn(
                launch.command, code_dir, env, launch.log_path, pass_fds=(read_fd,)))
        except OSError as exc:
            os.close(write_fd)
            self.ctx.report(f"chain {self.chain_id}: could not start its eval ahead of time ({exc}); "
                            "it starts after training")
            return
        finally:
            os.close(read_fd)
        ident = procs.StageIdentity(proc.pid, proc.pid, procs.create_time_of(proc.pid), launch.token)
        self.held = Held(launch, proc, write_fd, ident, time.monotonic())
        self.ctx.report(f"chain {self.chain_id}: eval started ahead (pid {proc.pid}): it imports while training "
                        "runs, then waits for the go")

    def take(self, launch: Launch) -> Optional[Held]:
        """The held eval, if it is still waiting and would run exactly `launch`."""
        held, self.held = self.held, None
        if held is None:
            return None
        if held.proc.poll() is not None or not held.launch.same_run(launch):
            why = (f"it exited ({exit_words(held.proc.returncode)}) before its go" if held.proc.poll() is not None
                   else "the eval was granted other GPUs or settings")
            self.held = held
            self.drop(why)
            return None
        return held

    @staticmethod
    def go(held: Held) -> subprocess.Popen:
        try:
            os.write(held.go_fd, b"1")
        finally:
            os.close(held.go_fd)
        return held.proc

    def drop(self, why: str) -> None:
        """No go: close its pipe (it exits on its own) and stop its process group."""
        held, self.held = self.held, None
        if held is None:
            return
        try:
            os.close(held.go_fd)
        except OSError:
            pass
        try:
            with open(held.launch.log_path, "ab") as log:
                log.write(f"opsdctl: the eval started ahead of time gets no go: {why}\n".encode())
        except OSError:
            pass
        # it exits on its own at end of file: a few seconds for that (a loaded machine is slow to
        # schedule it) before its group is signalled, so it can say why it stopped
        grace = self.ctx.grace()
        try:
            held.proc.wait(timeout=min(NO_GO_EXIT_S, grace))
        except subprocess.TimeoutExpired:
            pass
        procs.stop_stage(held.ident, grace, reap=lambda: held.proc.poll(), cut_short=self.ctx.forced)
        self.ctx.lineages.drop(held.proc.pid)


def exit_words(rc: int) -> str:
    import signal

    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"was killed by {name}"
    return f"exited with code {rc}"
