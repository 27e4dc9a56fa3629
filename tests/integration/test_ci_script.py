"""`.ci/run` stops when its PostgreSQL server does not start, instead of running the suite with
the store tests skipped (a failed `eval "$(...)"` would pass silently)."""

from __future__ import annotations

import shutil
import subprocess

from conftest import REPO


def test_ci_run_stops_when_postgres_does_not_start(tmp_path):
    ci = tmp_path / ".ci"
    ci.mkdir()
    shutil.copy(REPO / ".ci" / "run", ci / "run")
    stub = ci / "postgres.sh"
    stub.write_text("#!/usr/bin/env bash\necho 'postgres.sh: the server did not start' >&2\nexit 1\n")
    stub.chmod(0o755)
    marker = tmp_path / "reached"
    bin_dir = tmp_path / "bin"  # stand-ins: a browser already installed, and a python3 that says it ran
    bin_dir.mkdir()
    for name, body in (("chromium", "exit 0"), ("chromedriver", "exit 0"), ("python3", f"touch {marker}; exit 1")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    proc = subprocess.run(["bash", str(ci / "run")], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "the server did not start" in proc.stderr
    assert not marker.exists()  # nothing after the server step ran
