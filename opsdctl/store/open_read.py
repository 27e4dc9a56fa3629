"""Opening the store for reading at the least cost: how every command reads it.

Two ways to read the store, one per side: commands (cli/, client/) read through the Reader this
module hands out; the worker reads and writes its rows through the ORM session (`Store.read()`,
`Store.write()`), and gives the queries it shares with status (the planner's facts, compare's
runs) a Reader on its own engine (`open_reader(store)`).

A SQLite file whose schema is already at the migrations' head (one sqlite3 query says so) gets a
Reader on stdlib sqlite3 and SQLAlchemy is never imported. Anything else (no file yet, an empty
or foreign file, an old revision to upgrade, PostgreSQL) is opened by opsdctl.store.engine's
open_store first, with its messages, locks and upgrades, and read through that Store's engine.
"""

from __future__ import annotations

import os
import sqlite3

from opsdctl.store.migrations import HEAD, VERSION_TABLE
from opsdctl.store.reader import Reader, SqlAlchemyDriver, SqliteDriver
from opsdctl.store.urls import sqlite_file


def open_reader(store) -> Reader:
    """The one way to read the store without the ORM. `store`: its URL (a command), or a Store
    already open (the worker and the planner, which share their engine with it)."""
    if not isinstance(store, str):
        return Reader(SqlAlchemyDriver(store.engine), store.safe_url())
    reader = _at_head(store)
    if reader is not None:
        return reader
    from opsdctl.store.engine import open_store

    return open_reader(open_store(store))


def _at_head(db_url: str):
    """A sqlite3 Reader when `db_url` is a plain SQLite URL of a file at HEAD, else None."""
    path = sqlite_file(db_url)
    if path is None:
        return None
    try:
        if os.path.getsize(path) == 0:
            return None
    except OSError:
        return None
    driver = None
    try:
        driver = SqliteDriver(path)
        _, rows = driver.execute(f"SELECT version_num FROM {VERSION_TABLE}", {})
    except sqlite3.Error:  # not a database, no version table, ...: open_store says what is wrong
        if driver is not None:
            driver.close()
        return None
    if len(rows) != 1 or rows[0][0] != HEAD:
        driver.close()
        return None
    return Reader(driver, db_url)  # a SQLite URL carries no password: it is its own safe form
