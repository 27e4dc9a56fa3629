"""The local worker's GPUs, shared out between the chains it runs at once (opsdctl.plan.slots).

Every stage takes a ticket for its GPU count before it starts and gives its GPUs back when its
processes have freed them. Tickets are served in the order they were taken: a train stage that
waits for four GPUs is not starved by one-GPU evaluations that keep arriving; the ticket behind
it waits its turn even when its own GPUs are free (the stated cost of never starving a wide stage).

Which GPUs (opsdctl.plan.slots.pick_block, the rule the projected timeline uses too): an aligned
block of the count (devices[i*k:(i+1)*k]), so a 1-GPU stage never splits the only free pair a
2-GPU stage could use. Among the free blocks: the chain's own GPUs of its previous stage first (a
pre-started evaluation was started on them and keeps them), then a block inside a slot that is
already partly in use (whole slots stay whole for wider stages), then the lowest. The pool is
thread-safe: every chain runs in its own thread.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Optional, Sequence

from opsdctl.plan.slots import Layout, pick_block


@dataclass(frozen=True)
class Ticket:
    number: int
    chain_id: int
    stage: str
    count: int
    prefer: tuple[int, ...] = ()  # the chain's GPUs of its previous stage


class GpuPool:
    def __init__(self, layout: Layout):
        self.layout = layout
        self._cond = threading.Condition()
        self._holder: dict[int, tuple[int, str]] = {}  # device -> (chain id, stage) holding it
        self._line: list[Ticket] = []  # waiting tickets, first come first served
        self._numbers = itertools.count(1)

    def ticket(self, chain_id: int, stage: str, count: int, prefer: Sequence[int] = ()) -> Ticket:
        """Join the line for `count` GPUs."""
        if not 1 <= count <= len(self.layout.devices):
            raise ValueError(f"{stage} asks for {count} GPU(s) of {len(self.layout.devices)}")
        t = Ticket(next(self._numbers), chain_id, stage, count, tuple(prefer))
        with self._cond:
            self._line.append(t)
        return t

    def take(self, ticket: Ticket, timeout: float = 0.0) -> Optional[tuple[int, ...]]:
        """The ticket's GPUs, once it is first in line and they are free (waiting up to `timeout`
        seconds for that); None if not yet. Taken GPUs are the ticket holder's until give_back."""
        with self._cond:
            got = self._try(ticket)
            if got is None and timeout > 0:
                self._cond.wait(timeout)
                got = self._try(ticket)
            return got

    def leave(self, ticket: Ticket) -> None:
        """Give up a waiting ticket (the chain ended or was cancelled while it waited)."""
        with self._cond:
            if ticket in self._line:
                self._line.remove(ticket)
                self._cond.notify_all()

    def give_back(self, gpus: Sequence[int]) -> None:
        with self._cond:
            for g in gpus:
                self._holder.pop(g, None)
            self._cond.notify_all()

    def waiting_for(self, ticket: Ticket) -> str:
        """Why the ticket waits, for the worker's activity and log."""
        with self._cond:
            ahead = [t for t in self._line if t.number < ticket.number]
            held = sorted({cid for cid, _ in self._holder.values() if cid != ticket.chain_id})
        busy = f"in use by chain{'s' if len(held) != 1 else ''} {', '.join(map(str, held))}" if held else "in use"
        if ahead:
            first = ahead[0]
            return (f"{ticket.count} GPU(s) {busy}; chain {first.chain_id}'s {first.stage} is ahead in line "
                    f"for {first.count}")
        return f"{ticket.count} GPU(s) {busy}"

    def free(self) -> tuple[int, ...]:
        with self._cond:
            return tuple(d for d in self.layout.devices if d not in self._holder)

    # --- inside the lock ----------------------------------------------------------------------

    def _try(self, ticket: Ticket) -> Optional[tuple[int, ...]]:
        if not self._line or self._line[0] != ticket:
            return None
        block = self._pick(ticket)
        if block is None:
            return None
        self._line.pop(0)
        for g in block:
            self._holder[g] = (ticket.chain_id, ticket.stage)
        self._cond.notify_all()  # the next in line may be served now
        return block

    def _pick(self, ticket: Ticket) -> Optional[tuple[int, ...]]:
        return pick_block(self.layout, self._holder, ticket.count, ticket.prefer)
