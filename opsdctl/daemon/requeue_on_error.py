"""When the worker itself fails or is stopped mid-chain: put the chain back, never leave it `running`.

A bug, a store error, a full disk or a Ctrl-C of the worker is not the chain's fault. The chain becomes
`interrupted` and is re-queued as a fresh chain pointing at it (what recovery would do at the
next start), and its stage rows still marked running are closed. The store may itself be the
problem (a full disk): the worker's reserve beside a SQLite store is given back
(opsdctl.daemon.disk_reserve), and the write is tried a few times, as a killed stage's files free space.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

from opsdctl.errors import EnvironmentProblem
from opsdctl.daemon import disk_reserve
from opsdctl.daemon.env_errors import environment_problem
from opsdctl.daemon.salvage import recover_chain
from opsdctl.store.engine import stages_of
from opsdctl.store.models import Chain, utcnow
from opsdctl.store.states import State

ATTEMPTS = 5
RETRY_S = 1.0


def requeue_after_error(store, cfg, chain_id: int, reason: str, report: Callable[[str], None]) -> tuple[bool, Optional[int]]:
    """(recorded, the new chain's id). recorded False: the store could not be written; the next
    worker start's recovery re-queues the chain. Finished work is salvaged (opsdctl.daemon.salvage)."""
    notes: list[str] = []
    reserve = disk_reserve.reserve_path(store.sqlite_path)
    for attempt in range(ATTEMPTS):
        try:
            with store.write() as s:
                for st in stages_of(s, chain_id):
                    if st.state == State.RUNNING.value:
                        st.state, st.finished_at, st.reason = State.INTERRUPTED.value, utcnow(), reason
                chain = s.get(Chain, chain_id)
                if chain.state != State.RUNNING.value:
                    return True, None  # it ended meanwhile (a cancel)
                new_id = recover_chain(s, cfg, chain, reason, notes.append)
        except Exception as exc:
            notes.clear()
            if environment_problem(exc) is not None and disk_reserve.release(reserve):
                report("the store's disk is full: gave back the worker's reserve to record the re-queue")
                continue  # at once: the space is there now
            if attempt + 1 < ATTEMPTS:
                time.sleep(RETRY_S)
            continue
        for note in notes:
            report(note)
        return True, new_id
    return False, None


def environment_stop(exc: BaseException, chain_id: int, recorded: bool, new_id: Optional[int]) -> Optional[EnvironmentProblem]:
    """The one-line error the worker exits with when `exc` was the machine's, else None."""
    problem = environment_problem(exc)
    if problem is None:
        return None
    if not recorded:
        fate = "it could not be recorded (the next worker start re-queues it)"
    else:
        fate = f"it was re-queued as chain {new_id}" if new_id is not None else "it had ended (or its result was salvaged)"
    return EnvironmentProblem(f"worker stopped: {problem} while running chain {chain_id}; {fate}; "
                              "free the space or fix the permissions, then start the worker again")
