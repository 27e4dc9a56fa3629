"""Importing the compare report stays cheap: a fresh interpreter, no heavy module pulled in."""

import subprocess
import sys


def test_import_is_cheap():
    code = ("import sys, opsdctl.stats.compare, opsdctl.stats.inference, opsdctl.stats.plots; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('scipy', 'matplotlib', 'torch', 'rich')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
