"""Whose orphan is it: the worker's children, told apart between chains running at once.

The worker is the subreaper of its stages (opsdctl.daemon.subreaper): an orphan of any stage
becomes its child. With one chain at a time every such orphan is that chain's stage's. With
several, each stage's watch notes the descendants it sees (every few seconds), and an adopted
orphan is given to a stage only when that stage saw it, or when no other chain's stage or
pre-started evaluation runs. Every live stage leader of every chain is known, so one chain's
stop never takes another chain's stage for an orphan: a leader is started and registered in one
step (`start`) that no listing can interleave with, since a child born between the two would be
the worker's child, in its own session and nobody's leader, i.e. an orphan to whoever looked. An
orphan that escaped before any watch saw it, while several chains ran, is nobody's: it is left
alone (docs/reliability.md).
"""

from __future__ import annotations

import threading
from typing import Callable, Iterable, TypeVar

import psutil

from opsdctl.daemon import subreaper

P = TypeVar("P")


class Lineages:
    def __init__(self):
        self._lock = threading.Lock()
        self._leaders: dict[int, int] = {}  # live stage (or pre-started eval) leader pid -> chain id
        self._seen: dict[int, set[int]] = {}  # leader -> descendants its watch saw
        self._starting = threading.Lock()  # held from a leader's spawn to its registration

    def start(self, chain_id: int, spawn: Callable[[], P]) -> P:
        """Start a stage leader (`spawn()` returns its Popen) and register it before any other
        chain may list orphans; an exception from `spawn` registers nothing."""
        with self._starting:
            proc = spawn()
            self.add(proc.pid, chain_id)
        return proc

    def children_now(self) -> set[int]:
        """The worker's children before a stage starts (theirs are not its orphans)."""
        return subreaper.children()

    def add(self, leader: int, chain_id: int) -> None:
        with self._lock:
            self._leaders[leader] = chain_id
            self._seen.setdefault(leader, set())

    def drop(self, leader: int) -> None:
        with self._lock:
            self._leaders.pop(leader, None)
            self._seen.pop(leader, None)

    def saw(self, leader: int, pids: Iterable[int]) -> None:
        with self._lock:
            self._seen.setdefault(leader, set()).update(pids)

    def of(self, leader: int, chain_id: int, before: Iterable[int]) -> list[psutil.Process]:
        """The processes of the stage led by `leader` by descent (subreaper.lineage), its
        adopted orphans as the module docstring says."""
        with self._starting:  # no leader is half-started while the worker's children are listed
            with self._lock:
                known = set(before) | set(self._leaders)
                others = any(cid != chain_id for cid in self._leaders.values())
                seen = set(self._seen.get(leader, ()))
            return subreaper.lineage(leader, known, ours=lambda pid: not others or pid in seen)
