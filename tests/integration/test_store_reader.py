"""`status` / `compare` never import SQLAlchemy on a SQLite store at the schema's head (a fresh
interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import clean_env
from store_fill import filled  # noqa: F401  (a fixture)

WRAPPER = """\
import sys
from opsdctl.cli.main import main
sys.argv = ["opsdctl", *sys.argv[1:]]
try:
    main()
finally:
    sys.stdout.flush()
    print("MODULES", sorted(m for m in sys.modules if m.split(".")[0] in {"sqlalchemy", "sqlmodel"}), file=sys.stderr)
"""


def test_status_and_compare_do_not_import_sqlalchemy_on_a_sqlite_store_at_head(filled, tmp_path):
    cfg, store = filled
    store.dispose()
    script = tmp_path / "wrapper.py"
    script.write_text(WRAPPER)
    for args in (["status", "--json"], ["compare", "--json"], ["status"]):
        proc = subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, env=clean_env(),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "MODULES []" in proc.stderr, (args, proc.stderr[-2000:])
        if "--json" in args:
            json.loads(proc.stdout)
