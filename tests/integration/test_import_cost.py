"""Importing the compare report stays cheap: a fresh interpreter, no heavy module pulled in."""

import subprocess
import sys


def test_import_is_cheap():
    code = ("import sys, opsdctl.stats.compare, opsdctl.stats.inference, opsdctl.stats.plots; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('scipy', 'matplotlib', 'torch', 'rich')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_compare_and_advise_never_import_scipy(ws):
    """scipy.stats costs compare about half a second to import (every distribution's docstring is
    built) and scipy.special 0.2 s; the statistics take their functions from opsdctl.stats.special."""
    from conftest import clean_env

    ws.cli("queue", "baseline", "token-clip", "--repeats", "2", "--seed", "3")
    ws.run("worker", "--drain")
    for args in (["compare"], ["compare", "--json"], ["advise"]):
        res = subprocess.run([sys.executable, "-X", "importtime", "-m", "opsdctl.cli", *args], cwd=ws.root,
                             env=clean_env(ws.env), capture_output=True, text=True)
        assert res.returncode == 0, res.stderr[-2000:]
        imported = {line.rsplit("|", 1)[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time")}
        assert "numpy" in imported and not any(m.startswith("scipy") for m in imported), args
