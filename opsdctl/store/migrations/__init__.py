"""Schema migrations of the store (Alembic, run from code: users need no alembic.ini).

Opening a store brings it to HEAD (`opsdctl.store.engine.open_store`): a fresh database gets every
revision in order; a store made by opsdctl before migrations existed (tables from
`create_all`, no `alembic_version` table) is recognised by its tables, stamped BASE (the schema
it has) and upgraded from there, rows untouched. The check that runs on every open is one
`SELECT version_num FROM alembic_version` compared with HEAD, so `opsdctl status` stays fast and
never imports Alembic; only an out-of-date store pays for the upgrade, under a lock (a file lock
plus BEGIN IMMEDIATE on SQLite, an advisory transaction lock on PostgreSQL) so that many
processes opening a new store at once migrate it exactly once.

A store whose revision is newer than this opsdctl knows is refused with one line (upgrade
opsdctl); nothing is ever downgraded automatically.

Changing the schema (tests/integration/test_store_migrations.py fails until you do all three):
  1. edit opsdctl/store/models.py;
  2. `python -m opsdctl.store.migrations revision -m "what changed"` writes versions/NNNN_<slug>.py from
     the difference between the models and HEAD (review it: Alembic cannot see renames);
  3. set HEAD below to the new revision id.
SQLite notes for hand-written revisions: `op.batch_alter_table` is used for anything SQLite's
ALTER TABLE cannot do (render_as_batch is on), and foreign keys are enforced, so copy-and-swap
of a referenced table needs care.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

HEAD = "0009_chain_eval_draw"  # the newest revision in versions/ (a test keeps the two in step)
BASE = "0001_initial"  # the schema the pre-migration opsdctl created with create_all
VERSION_TABLE = "alembic_version"
LEGACY_TABLES = (
    "variant", "code_snapshot", "chain", "stage", "score", "train_stats", "worker_run", "transition", "meta",
)

HERE = Path(__file__).resolve().parent


def alembic_config(connection=None):
    """An in-memory Alembic config pointing at this package; `connection` for env.py."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    cfg.attributes["connection"] = connection
    return cfg


def current_revision(conn) -> Optional[str]:
    from alembic.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()


def known_revisions() -> list[str]:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    return [rev.revision for rev in script.walk_revisions()]


def script_head() -> str:
    from alembic.script import ScriptDirectory

    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"opsdctl migrations have {len(heads)} heads ({heads}); merge them")
    return heads[0]


def upgrade(conn, where: str = "store") -> tuple[Optional[str], str]:
    """Bring the schema on `conn` to HEAD inside the caller's transaction.

    Returns (revision before, revision after); before is "pre-migration" for a store made by
    the create_all code, None for an empty database.
    """
    from alembic import command
    from sqlalchemy import inspect

    from opsdctl.errors import UserError

    cfg = alembic_config(conn)
    before = current_revision(conn)
    if before is None:
        present = set(inspect(conn).get_table_names()) & set(LEGACY_TABLES)
        if present == set(LEGACY_TABLES):
            command.stamp(cfg, BASE)  # the tables are exactly revision BASE: record that, touch no row
            before = "pre-migration"
        elif present:
            missing = ", ".join(sorted(set(LEGACY_TABLES) - present))
            raise UserError(
                f"{where}: has some opsdctl tables but not {missing}, and no {VERSION_TABLE} table; "
                "it is not a store this opsdctl can upgrade (point db at another database)"
            )
    elif before not in known_revisions():
        raise UserError(
            f"{where}: schema revision {before!r} is newer than this opsdctl knows (head {HEAD}); "
            "upgrade opsdctl (pip install -U opsdctl) on this machine"
        )
    command.upgrade(cfg, "head")
    return before, current_revision(conn)


def schema_diff(conn, metadata=None) -> list:
    """What Alembic autogenerate finds between the models (or `metadata`) and the database on
    `conn`: empty when the migrations create exactly the tables the models describe."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlmodel import SQLModel

    import opsdctl.store.models  # noqa: F401

    ctx = MigrationContext.configure(conn, opts={"compare_type": True})
    diff = compare_metadata(ctx, SQLModel.metadata if metadata is None else metadata)
    return [d for d in diff if not _is_version_table(d)]


def _is_version_table(diff) -> bool:
    # ("remove_table", Table) for alembic_version, which no model describes
    return isinstance(diff, tuple) and diff[0] == "remove_table" and diff[1].name == VERSION_TABLE
