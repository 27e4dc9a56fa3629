"""Reading the store without the ORM: the SQL of opsdctl.store.queries in, light records out.

Why: `status` and `compare` only read, and importing SQLAlchemy + SQLModel (about 0.4 s) cost
more than everything else they do, even at 10,000 chains. For a SQLite store at the schema's
head, opsdctl.store.open_read hands out a Reader on the stdlib sqlite3 driver, and nothing
imports SQLAlchemy; every other store (PostgreSQL, or a SQLite file to create or upgrade first)
gets a Reader on the Store's SQLAlchemy engine (`open_reader(store)`). One interface, one set of
queries, whichever driver runs them.

Records are named tuples with the models' attribute names (chain.id, chain.state, variant.label),
decoded as the ORM decodes them (opsdctl.store.columns): JSON columns to Python values, datetimes
to aware UTC (SQLite keeps naive UTC text), booleans to bool.
"""

from __future__ import annotations

import json
from collections import namedtuple
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Iterator, Optional

from opsdctl.errors import UserError
from opsdctl.store import queries
from opsdctl.store.columns import BOOL, DATETIME, JSON, KINDS
from opsdctl.store.states import State
from opsdctl.store.values import as_utc, variant_label
from opsdctl.store.variant_ref import pick_variant

SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"  # how SQLAlchemy stores a datetime in SQLite (naive UTC)
SQLITE_BUSY_TIMEOUT_S = 120.0  # every connection to a SQLite store waits this long for a writer


def _datetime(value):
    if value is None:
        return None
    return as_utc(datetime.fromisoformat(value) if isinstance(value, str) else value)


def _json(value):
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def _bool(value):
    return None if value is None else bool(value)


class _Labelled:
    __slots__ = ()

    @property
    def label(self) -> str:
        return variant_label(self.name, self.version)


_CLASSES: dict[tuple, type] = {}


def _record_class(names: tuple[str, ...]) -> type:
    cls = _CLASSES.get(names)
    if cls is None:
        base = namedtuple("Record", names, rename=True)
        # a row with a variant's name and version answers `.label`, as the model does
        cls = type("Record", (_Labelled, base), {"__slots__": ()}) if {"name", "version"} <= set(names) else base
        _CLASSES[names] = cls
    return cls


class SqliteDriver:
    """stdlib sqlite3 on an existing file; only ever reads (opened mode=rw: it never creates one)."""

    dialect = "sqlite"

    def __init__(self, path: str, busy_timeout_s: float = SQLITE_BUSY_TIMEOUT_S):
        import sqlite3
        from urllib.parse import quote

        self.conn = sqlite3.connect(f"file:{quote(path)}?mode=rw", uri=True, timeout=busy_timeout_s,
                                    isolation_level=None, check_same_thread=False)
        self.conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        self._depth = 0

    def execute(self, sql: str, params: dict) -> tuple[list[str], list[tuple]]:
        cur = self.conn.execute(sql, params)
        return [d[0] for d in cur.description], cur.fetchall()

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        if self._depth == 0:
            self.conn.execute("BEGIN")
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


class SqlAlchemyDriver:
    """A connection of a Store's engine (PostgreSQL, or SQLite opened through the ORM path)."""

    def __init__(self, engine):
        self.engine = engine
        self.dialect = engine.dialect.name
        self._conn = None  # held while a snapshot is open

    def execute(self, sql: str, params: dict) -> tuple[list[str], list[tuple]]:
        from sqlalchemy import text

        if self._conn is not None:
            result = self._conn.execute(text(sql), params)
            return list(result.keys()), [tuple(r) for r in result]
        with self.engine.connect() as conn:
            result = conn.execute(text(sql), params)
            return list(result.keys()), [tuple(r) for r in result]

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        if self._conn is not None:
            yield
            return
        with self.engine.connect() as conn:
            self._conn = conn
            try:
                with conn.begin():
                    yield
            finally:
                self._conn = None

    def close(self) -> None:
        pass  # the engine is the Store's


class Reader:
    """The store's read queries over one driver. `safe_url`: the store, for messages."""

    def __init__(self, driver, safe_url: str):
        self.driver = driver
        self.safe_url = safe_url
        self._json_text = driver.dialect == "sqlite"  # PostgreSQL's driver decodes JSON itself

    # --- the primitive: SQL text in, decoded rows out -------------------------------------
    def rows(self, sql: str, **params: Any) -> list:
        """Records (named tuples with the result's column names)."""
        names, decoded = self._run(sql, params)
        cls = _record_class(tuple(names))
        return [cls._make(r) for r in decoded]

    def tuples(self, sql: str, **params: Any) -> list[tuple]:
        """Plain decoded tuples, for the scans that unpack 10,000 rows and need no names."""
        return self._run(sql, params)[1]

    def _run(self, sql: str, params: dict) -> tuple[list[str], list[tuple]]:
        if self.driver.dialect == "sqlite":  # bind datetimes as SQLAlchemy stores them there
            params = {k: v.astimezone(timezone.utc).strftime(SQLITE_TIME) if isinstance(v, datetime) else v
                      for k, v in params.items()}
        names, raw = self.driver.execute(sql, params)
        decoders = [(i, self._decoder(KINDS[n])) for i, n in enumerate(names) if n in KINDS]
        decoders = [(i, f) for i, f in decoders if f is not None]
        if not decoders:
            return names, raw
        out = []
        for r in raw:
            r = list(r)
            for i, f in decoders:
                r[i] = f(r[i])
            out.append(tuple(r))
        return names, out

    def _decoder(self, kind: str):
        if kind == JSON:
            return _json if self._json_text else None
        return _datetime if kind == DATETIME else _bool if kind == BOOL else None

    def rows_in(self, sql: str, values) -> list:
        """Records of `sql` whose `{ids}` IN-list holds `values`, read a chunk at a time
        (queries.in_chunks: SQLite's parameter limit); in one snapshot, as one query would be."""
        values = list(values)
        if not values:
            return []
        with self.snapshot():
            return [row for text, params in queries.in_chunks(sql, values) for row in self.rows(text, **params)]

    def value(self, sql: str, **params: Any):
        got = self.tuples(sql, **params)
        return got[0][0] if got else None

    @contextmanager
    def snapshot(self) -> Iterator["Reader"]:
        """The reads inside see one state of the store (one read transaction)."""
        with self.driver.snapshot():
            yield self

    def close(self) -> None:
        self.driver.close()

    # --- what the commands, status, compare and the planner read --------------------------
    def find_chain(self, chain_id: int):
        got = self.rows(queries.CHAIN, chain_id=chain_id)
        return got[0] if got else None

    def get_chain(self, chain_id: int):
        """The chain, or the one-line UserError a command gives for an id it does not know."""
        chain = self.find_chain(chain_id)
        if chain is None:
            raise UserError(f"chain {chain_id}: no such chain (see `opsdctl status --all`)")
        return chain

    def active_chain_ids(self) -> list[int]:
        return [r[0] for r in self.tuples(queries.ACTIVE_CHAIN_IDS)]

    def requeued_as(self, chain_id: int):
        """The latest re-run of an interrupted chain (None: not re-queued)."""
        got = self.rows(queries.REQUEUED_AS, chain_id=chain_id)
        return got[0] if got else None

    def chains_of_variant(self, variant_id: int) -> list:
        return self.rows(queries.CHAINS_OF_VARIANT, variant_id=variant_id)

    def variant(self, variant_id: int):
        got = self.rows(queries.VARIANT, variant_id=variant_id)
        return got[0] if got else None

    def code_snapshot(self, snapshot_id: Optional[int]):
        got = self.rows(queries.CODE_SNAPSHOT, snapshot_id=snapshot_id) if snapshot_id is not None else []
        return got[0] if got else None

    def queued_chains(self) -> list:
        return self.rows(queries.QUEUED_CHAINS)

    def chains_in_state(self, state: State) -> list:
        return self.rows(queries.CHAINS_IN_STATE, state=State(state).value)

    def finished_chains(self, limit: Optional[int]) -> list:
        if limit is None:
            return self.rows(queries.FINISHED_CHAINS)
        return self.rows(queries.FINISHED_CHAINS_LIMITED, limit=limit)

    def stages_of(self, chain_id: int) -> list:
        return self.rows(queries.STAGES_OF, chain_id=chain_id)

    def score_of(self, chain_id: int):
        got = self.rows(queries.SCORE_OF, chain_id=chain_id)
        return got[0] if got else None

    def all_variants(self) -> list:
        return self.rows(queries.ALL_VARIANTS)

    def variants_named(self, name: str) -> list:
        return self.rows(queries.VARIANTS_NAMED, name=name)

    def find_variant(self, ref: str):
        """`name` (its latest version) or `name@vN` (opsdctl.store.variant_ref)."""
        return pick_variant(ref, self.variants_named, self.all_variants)

    def latest_worker(self):
        got = self.rows(queries.LATEST_WORKER)
        return got[0] if got else None

    def get_meta(self, key: str) -> Optional[str]:
        return self.value(queries.META_VALUE, key=key)
