"""opsdkit.startup_clock: phase durations from a clock."""

from opsdkit.startup_clock import Phases


def test_phases_close_one_after_another():
    ticks = iter([10.0, 10.5, 12.25, 12.3])
    ph = Phases(clock=lambda: next(ticks))
    assert ph.mark("imports") == 0.5
    assert ph.mark("engine") == 1.75
    assert ph.mark("push") == 0.05
    assert list(ph.seconds) == ["imports", "engine", "push"]
