"""Is the store's worker alive: a recorded start time a second or two off is still the same process."""

from __future__ import annotations

import os

import psutil


def test_a_live_worker_stays_running_when_the_boot_time_moves():
    """psutil's start time = /proc/stat btime (whole seconds, moved by NTP and VM clock steps) +
    ticks since boot: a live worker can read a second away from its recorded start. It is still
    running; a recorded start far from the process's (a reused pid) is not."""
    import os
    import socket

    import psutil

    from opsdctl.run.worker_view import worker_view
    from opsdctl.store.models import WorkerRun

    me = psutil.Process(os.getpid()).create_time()

    def row(create_time):
        return WorkerRun(pid=os.getpid(), host=socket.gethostname(), create_time=create_time)

    for shift in (0.0, 1.0, -1.0, 2.0):  # btime crossed a second (or two) since the worker started
        assert worker_view(row(me + shift))["state"] == "running", shift
    for shift in (60.0, -3600.0):
        assert worker_view(row(me + shift))["state"] == "dead", shift
