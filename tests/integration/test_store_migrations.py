"""Many processes opening a new store (or a pre-migration one) at once migrate it exactly once."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap

from support.legacy_store import make_legacy_store, table_counts

from opsdctl.store import migrations


def test_concurrent_first_opens_migrate_once(tmp_path):
    """Three processes open the same new store at once (and three a pre-migration one)."""
    fresh, old = tmp_path / "fresh.db", tmp_path / "old.db"
    make_legacy_store(old)
    code = textwrap.dedent("""
        import sys
        from opsdctl.store.engine import open_store
        print(open_store(sys.argv[1]).revision())
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code, f"sqlite:///{db}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for db in (fresh, old) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [o[1] for o in outs]
    assert {o[0].strip() for o in outs} == {migrations.HEAD}
    con = sqlite3.connect(fresh)
    assert con.execute("select count(*) from alembic_version").fetchone() == (1,)
    con.close()
    assert table_counts(old)["chain"] == 3
