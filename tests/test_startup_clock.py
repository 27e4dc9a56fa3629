"""opsdkit.startup_clock: phase durations from a clock, and the process age from the kernel."""

import subprocess
import sys
import time

from opsdkit.startup_clock import Phases, process_start_epoch, since_process_start


def test_phases_close_one_after_another():
    ticks = iter([10.0, 10.5, 12.25, 12.3])
    ph = Phases(clock=lambda: next(ticks))
    assert ph.mark("imports") == 0.5
    assert ph.mark("engine") == 1.75
    assert ph.mark("push") == 0.05
    assert list(ph.seconds) == ["imports", "engine", "push"]


def test_process_age_counts_what_ran_before_main():
    # a child that sleeps before asking: its age includes the sleep and the interpreter's start
    out = subprocess.run([sys.executable, "-c", "import time; time.sleep(0.6); "
                          "from opsdkit.startup_clock import since_process_start; print(since_process_start())"],
                         capture_output=True, text=True, check=True)
    assert 0.6 <= float(out.stdout) < 30
    assert process_start_epoch() <= time.time()
    assert since_process_start() >= 0
