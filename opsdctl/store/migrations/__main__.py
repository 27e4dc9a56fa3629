"""`python -m opsdctl.store.migrations`: write the next revision, upgrade a store, print its revision."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from opsdctl.store import migrations
from opsdctl.store.engine import Store, open_store
from opsdctl.store.migrations import HEAD, HERE, alembic_config, current_revision


def _new_revision(message: str) -> Path:
    """Autogenerate the next revision from models vs. a scratch SQLite store at HEAD."""
    import re
    import tempfile

    from alembic import command
    from sqlalchemy import create_engine

    existing = sorted(p.name for p in (HERE / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))
    number = int(existing[-1][:4]) + 1 if existing else 1
    slug = re.sub(r"[^a-z0-9]+", "_", message.lower()).strip("_")[:40] or "change"
    rev_id = f"{number:04d}_{slug}"
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_engine(f"sqlite:///{tmp}/scratch.db")
        with engine.begin() as conn:
            cfg = alembic_config(conn)
            cfg.set_main_option("file_template", "%%(rev)s")  # the id already carries the slug
            command.upgrade(cfg, "head")
            command.revision(cfg, message=message, autogenerate=True, rev_id=rev_id)
        engine.dispose()
    return next((HERE / "versions").glob(f"{rev_id}*.py"))


def main(argv: Optional[list[str]] = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m opsdctl.store.migrations", description=migrations.__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("revision", help="write the next revision from the difference models vs. HEAD")
    r.add_argument("-m", "--message", required=True)
    for name, text in (("upgrade", "bring a store to HEAD (opening it does the same)"),
                       ("current", "print a store's revision")):
        c = sub.add_parser(name, help=text)
        c.add_argument("--db", required=True, help="SQLAlchemy URL (password from the URL or PGPASSWORD)")
    args = p.parse_args(argv)
    if args.cmd == "revision":
        path = _new_revision(args.message)
        print(f"wrote {path}; review it, then set HEAD = {path.stem!r} in {HERE / '__init__.py'}")
        return 0
    if args.cmd == "upgrade":
        store = open_store(args.db)
        print(f"{store.safe_url()}: at {HEAD}")
        return 0
    store = Store(args.db)
    with store.engine.connect() as conn:
        print(f"{store.safe_url()}: {current_revision(conn) or 'no revision (empty, or made before migrations)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
