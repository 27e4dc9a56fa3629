"""opsdkit.startup_clock: the process age from the kernel counts what ran before main (a fresh
interpreter)."""

import subprocess
import sys
import time

from opsdkit.startup_clock import process_start_epoch, since_process_start


def test_process_age_counts_what_ran_before_main():
    # a child that sleeps before asking: its age includes the sleep and the interpreter's start
    out = subprocess.run([sys.executable, "-c", "import time; time.sleep(0.6); "
                          "from opsdkit.startup_clock import since_process_start; print(since_process_start())"],
                         capture_output=True, text=True, check=True)
    assert 0.6 <= float(out.stdout) < 30
    assert process_start_epoch() <= time.time()
    assert since_process_start() >= 0
