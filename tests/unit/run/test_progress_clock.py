"""The stall rule (opsdctl.run.progress_clock): a stage's usual interval between progress records,
and when it counts as stalled."""

from __future__ import annotations

import datetime as dt

from opsdctl.run.progress_clock import ProgressClock, stalled

T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


def _at(s: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=s)


def test_progress_clock_usual_interval_and_stall_rule():
    clock = ProgressClock()
    assert clock.fields() == {"changed_at": None, "interval_s": None}
    # model loading takes 60 s, then a step every 10 s; repeated records of one step are no progress
    for t, step in ((0, 0), (60, 1), (70, 2), (70.5, 2), (80, 3), (90, 4)):
        clock.observe({"step": step, "max_steps": 100}, _at(t))
    f = clock.fields()
    assert f["interval_s"] == 10.0  # the first (loading) gap is left out of the median
    assert f["changed_at"] == _at(90).isoformat(timespec="seconds")
    assert stalled(f, _at(90 + 29)) is None
    assert stalled(f, _at(90 + 31)) == {"for_s": 31.0, "interval_s": 10.0}
    # what the store holds may be up to STORE_LAG_S old: status waits that much longer
    assert stalled(f, _at(90 + 31), lag_s=2.5) is None and stalled(f, _at(90 + 33), lag_s=2.5) is not None
    # too little history: no usual interval, never called stalled
    young = ProgressClock()
    young.observe({"done": 1, "total": 9}, _at(0))
    young.observe({"done": 2, "total": 9}, _at(5))
    assert young.fields()["interval_s"] is None and stalled(young.fields(), _at(1000)) is None
    assert stalled(None, _at(0)) is None and stalled({"text": "step 3"}, _at(0)) is None
