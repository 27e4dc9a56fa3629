"""Alembic environment for the opsdctl store.

Runs only through `opsdctl.store.migrations` (there is no alembic.ini): the caller hands over an open
connection inside its own transaction in `config.attributes["connection"]`, so a migration and
the version stamp commit together, under the caller's lock (see opsdctl/store/migrations/__init__.py).
"""

from alembic import context
from sqlmodel import SQLModel

import opsdctl.store.models  # noqa: F401  (registers the tables on SQLModel.metadata)

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "opsdctl migrations run through opsdctl (opening a store upgrades it); "
        "see `python -m opsdctl.store.migrations --help`"
    )


def render_item(type_, obj, autogen_context):
    """Write revisions with plain SQLAlchemy types, so an old revision never changes meaning
    when a model's Python-side type does (UTCDateTime is DateTime(timezone=True) in DDL)."""
    if type_ == "type":
        from sqlmodel.sql.sqltypes import AutoString

        from opsdctl.store.models import UTCDateTime

        if isinstance(obj, AutoString):
            return "sa.String()"
        if isinstance(obj, UTCDateTime):
            return "sa.DateTime(timezone=True)"
    return False


context.configure(
    connection=connection,
    target_metadata=SQLModel.metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
    compare_type=True,
    render_item=render_item,
)
with context.begin_transaction():
    context.run_migrations()
