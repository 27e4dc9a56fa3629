"""One chain's clean-up never takes another chain's stage, started that very instant, for an
orphan of its own (the worker's children in other sessions look like adopted orphans)."""

import subprocess
import sys
import threading
import time

import pytest

from opsdctl.daemon.lineages import Lineages


def _spawn_session_leader() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)


def test_a_leader_being_started_is_never_listed_as_another_chains_orphan():
    lineages = Lineages()
    lineages.add(999_999_999, chain_id=2)  # chain 2's stage leader (gone): it now cleans up
    spawned = threading.Event()
    release = threading.Event()
    started: list[subprocess.Popen] = []

    def slow_spawn():
        proc = _spawn_session_leader()
        started.append(proc)
        spawned.set()
        release.wait(10)  # the moment between Popen and registration, held open
        return proc

    t = threading.Thread(target=lambda: lineages.start(3, slow_spawn))
    t.start()
    try:
        assert spawned.wait(10)
        listed: list = []
        lister = threading.Thread(target=lambda: listed.append(lineages.of(999_999_999, 2, before=())))
        lister.start()
        time.sleep(0.3)
        assert lister.is_alive(), "orphans were listed while a leader was half-started"
        release.set()
        lister.join(10)
        t.join(10)
        assert started[0].pid not in {p.pid for p in listed[0]}
    finally:
        release.set()
        for proc in started:
            proc.kill()
            proc.wait()


def test_a_spawn_that_fails_registers_nothing_and_frees_the_listing():
    lineages = Lineages()

    def failing():
        raise OSError("no such file")

    with pytest.raises(OSError, match="no such file"):
        lineages.start(1, failing)
    assert lineages.of(999_999_999, 1, before=()) == []


def test_without_other_chains_a_session_child_not_started_as_a_leader_is_an_orphan():
    """The rule the first test guards: an unregistered child in another session is taken."""
    lineages = Lineages()
    lineages.add(999_999_999, chain_id=2)
    proc = _spawn_session_leader()
    try:
        assert proc.pid in {p.pid for p in lineages.of(999_999_999, 2, before=())}
    finally:
        proc.kill()
        proc.wait()
