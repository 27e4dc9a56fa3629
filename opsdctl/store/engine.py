"""The store: engine creation, transactions, and the small queries everything else uses.

Writes and most reads go through SQLModel/SQLAlchemy, so the same code runs on PostgreSQL; the
reads of status and compare are SQL text (opsdctl/store/queries.py) that the functions here and the
light reader (opsdctl/store/reader.py, no SQLAlchemy import on a SQLite store) both run. Only for
SQLite URLs do we add: WAL journal (readers never block the writer), a long busy timeout, and
`BEGIN IMMEDIATE` for every write transaction, so a write never has to upgrade a read lock
(the upgrade is what fails with "database is locked" under concurrency; an immediate writer
simply waits its turn). Twenty `opsdctl queue` processes and a worker can write at once.

The schema is Alembic's (opsdctl/store/migrations/): opening a store upgrades it to the head revision,
including a pre-migration SQLite runs.db, in place. Credentials come only from the URL or the
environment (libpq's PGPASSWORD, PGPASSFILE, PGSERVICE...); messages show `safe_url()` and
`redact()` every database error before it reaches the user.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from sqlalchemy import create_engine, event, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, NoSuchModuleError, OperationalError, ProgrammingError
from sqlmodel import Session, SQLModel

from opsdctl.errors import UserError
from opsdctl.store.credentials import mask_url, redact
from opsdctl.store.models import (
    Chain,
    CodeSnapshot,
    Meta,
    Score,
    Stage,
    TrainStats,
    Variant,
    WorkerRun,
)
from opsdctl.store import queries
from opsdctl.store.reader import SQLITE_BUSY_TIMEOUT_S
from opsdctl.store.states import State
from opsdctl.store.variant_ref import pick_variant

PG_CONNECT_TIMEOUT_S = 10  # unless the URL or PGCONNECT_TIMEOUT says otherwise


class Store:
    def __init__(self, url: str):
        self.url = url
        parsed = make_url(url)
        self.dialect = parsed.get_backend_name()
        self.is_sqlite = self.dialect == "sqlite"
        self.engine = _make_engine(url)
        self._writer = self.engine.execution_options(sqlite_immediate=True)

    def __repr__(self) -> str:
        return f"Store({self.safe_url()})"

    @property
    def sqlite_path(self) -> Optional[Path]:
        if not self.is_sqlite:
            return None
        db = make_url(self.url).database
        return Path(db) if db and db != ":memory:" else None

    def safe_url(self) -> str:
        """The URL without its password, for messages and status."""
        return mask_url(self.url)

    def redact(self, message: str) -> str:
        """`message` with the store's password (from the URL or PGPASSWORD) replaced by ***."""
        return redact(message, self.url)

    @contextmanager
    def write(self) -> Iterator[Session]:
        """One write transaction (BEGIN IMMEDIATE on SQLite, a transaction advisory lock on
        PostgreSQL: one writer at a time either way); commits on success."""
        with Session(self._writer, expire_on_commit=False) as session:
            if self.dialect == "postgresql":
                # Writers take turns, as with BEGIN IMMEDIATE on SQLite: read-then-write
                # sequences (next repeat, next version, guarded moves) see every earlier commit.
                # As SQLite's busy timeout: waiting longer is an error, never a silent hang.
                from opsdctl.store.locks import LOCK_CLASS, WRITE_KEY

                session.execute(text(f"SET LOCAL lock_timeout = '{int(SQLITE_BUSY_TIMEOUT_S)}s'"))
                session.execute(text("SELECT pg_advisory_xact_lock(CAST(:c AS integer), CAST(:k AS integer))"),
                                {"c": LOCK_CLASS, "k": WRITE_KEY})
            yield session
            session.commit()

    @contextmanager
    def read(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as session:
            yield session

    def ensure_schema(self) -> None:
        """Bring the schema to the migrations' head: one cheap query when it is there already;
        otherwise upgrade it once, under a lock, whoever else opens the store at the same time."""
        from opsdctl.store import migrations
        path = self.sqlite_path
        # A missing or empty SQLite file is only ever created under the lock below, so an empty
        # one found there was left by someone else: refused, never silently made a new store.
        if (path is None or _has_bytes(path)) and self.revision() == migrations.HEAD:
            return
        if path is None:
            self._upgrade()
            return
        from filelock import FileLock

        with FileLock(str(path) + ".init.lock", timeout=SQLITE_BUSY_TIMEOUT_S):
            if path.exists() and not _has_bytes(path):
                raise UserError(f"store {path}: the file is empty (0 bytes), not an opsdctl store; delete it "
                                "(or move it aside) and the next command starts a new store there")
            if self.revision() == migrations.HEAD:
                return
            raw = self.engine.raw_connection()  # outside any transaction: WAL cannot switch inside one
            try:
                _refuse_foreign(raw.driver_connection, path)  # before WAL: that rewrites the header
                raw.driver_connection.execute("PRAGMA journal_mode=WAL")
            finally:
                raw.close()
            self._upgrade()

    def revision(self) -> Optional[str]:
        """The store's Alembic revision; None for an empty or pre-migration database."""
        from opsdctl.store.migrations import VERSION_TABLE

        try:
            with self.engine.connect() as conn:
                rows = conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").scalars().all()
        except ProgrammingError:  # PostgreSQL: no such table
            return None
        except OperationalError as exc:
            if self.is_sqlite and "no such table" in str(exc):
                return None
            raise
        return rows[0] if len(rows) == 1 else None

    def _upgrade(self) -> None:
        from opsdctl.store import migrations
        from opsdctl.store.locks import LOCK_CLASS, MIGRATION_KEY

        with self._writer.begin() as conn:
            if self.dialect == "postgresql":  # concurrent openers wait here, then find it done
                conn.execute(text(f"SET LOCAL lock_timeout = '{int(SQLITE_BUSY_TIMEOUT_S)}s'"))
                conn.execute(text("SELECT pg_advisory_xact_lock(CAST(:c AS integer), CAST(:k AS integer))"),
                             {"c": LOCK_CLASS, "k": MIGRATION_KEY})
            migrations.upgrade(conn, where=self.safe_url())

    def dispose(self) -> None:
        self.engine.dispose()


def _refuse_foreign(conn, path: Path) -> None:
    """A SQLite file holding tables, none of them opsdctl's, is another program's: adding our
    tables to it would be a surprise at best. Refused, the file untouched."""
    from opsdctl.store.migrations import LEGACY_TABLES, VERSION_TABLE

    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    tables = {t for t in tables if not t.startswith("sqlite_")}
    if tables and not tables & {*LEGACY_TABLES, VERSION_TABLE}:
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise UserError(f"store {path}: holds another program's tables ({shown}), none of opsdctl's; point db "
                        "at a new file such as sqlite:///runs.db")


def _has_bytes(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except FileNotFoundError:
        return False


def _make_engine(url: str):
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        connect_args = {}
        if (parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query
                and "PGCONNECT_TIMEOUT" not in os.environ):
            connect_args["connect_timeout"] = PG_CONNECT_TIMEOUT_S
        try:
            return create_engine(url, pool_pre_ping=True, connect_args=connect_args)
        except NoSuchModuleError:
            raise UserError(f"db = {mask_url(url)}: SQLAlchemy knows no driver {parsed.drivername!r}; write e.g. "
                            "postgresql+psycopg://user@host/db (pip install 'opsdctl[postgres]')") from None
        except ImportError as exc:
            safe = mask_url(url)
            extra = " (pip install 'opsdctl[postgres]')" if parsed.get_backend_name() == "postgresql" else ""
            raise UserError(f"db = {safe}: its driver is not installed: {exc}{extra}") from None
    db = make_url(url).database
    if db and db != ":memory:":
        Path(db).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "isolation_level": None, "check_same_thread": False}
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # pragma: no branch - sqlite only
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        immediate = conn.get_execution_options().get("sqlite_immediate", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def open_store(db_url: str) -> Store:
    """The store at `db_url`, its schema at the migrations' head. Database errors (server down,
    wrong password, ...) become one UserError line, without the password."""
    store = Store(db_url)
    try:
        store.ensure_schema()
    except DBAPIError as exc:
        store.dispose()
        raise UserError(f"store {store.safe_url()}: {store.redact(db_error_text(exc))}") from None
    return store


def db_error_text(exc: BaseException) -> str:
    """The driver's own message of a database error, on one line (no SQL, no parameters)."""
    orig = getattr(exc, "orig", None) or exc
    return " ".join(str(orig).split()) or type(orig).__name__


# --- queries ------------------------------------------------------------------------------


def get_chain(session: Session, chain_id: int) -> Chain:
    chain = session.get(Chain, chain_id)
    if chain is None:
        raise UserError(f"chain {chain_id}: no such chain (see `opsdctl status --all`)")
    return chain


def queued_chains(session: Session) -> list[Chain]:
    """Queued chains in run order: higher priority first, then queue order."""
    return _chains(session, queries.QUEUED_CHAINS)


def chains_in_state(session: Session, state: State) -> list[Chain]:
    return _chains(session, queries.CHAINS_IN_STATE, state=state.value)


def finished_chains(session: Session, limit: Optional[int]) -> list[Chain]:
    if limit is None:
        return _chains(session, queries.FINISHED_CHAINS)
    return _chains(session, queries.FINISHED_CHAINS_LIMITED, limit=limit)


def all_chains(session: Session) -> list[Chain]:
    return _chains(session, queries.ALL_CHAINS)


def all_snapshots(session: Session) -> list[CodeSnapshot]:
    return _rows(session, CodeSnapshot, queries.ALL_SNAPSHOTS)


def any_queued(session: Session) -> bool:
    return session.execute(text(queries.ANY_QUEUED)).first() is not None


def _chains(session: Session, sql: str, **params) -> list[Chain]:
    return _rows(session, Chain, sql, **params)


def _rows(session: Session, model, sql: str, **params) -> list:
    """ORM objects of `model` from one of the SQL texts in opsdctl.store.queries."""
    return list(session.scalars(select(model).from_statement(text(sql)), params))


def stages_of(session: Session, chain_id: int) -> list[Stage]:
    return _rows(session, Stage, queries.STAGES_OF, chain_id=chain_id)


def stage_of(session: Session, chain_id: int, name: str) -> Optional[Stage]:
    return session.scalars(select(Stage).where(Stage.chain_id == chain_id, Stage.name == name)).first()


def running_stages(session: Session) -> list[Stage]:
    return list(session.scalars(select(Stage).where(Stage.state == "running").order_by(Stage.id)))


def score_of(session: Session, chain_id: int) -> Optional[Score]:
    got = _rows(session, Score, queries.SCORE_OF, chain_id=chain_id)
    return got[0] if got else None


def train_stats_of(session: Session, chain_id: int) -> Optional[TrainStats]:
    return session.scalars(select(TrainStats).where(TrainStats.chain_id == chain_id)).first()


def variants_named(session: Session, name: str) -> list[Variant]:
    return _rows(session, Variant, queries.VARIANTS_NAMED, name=name)


def all_variants(session: Session) -> list[Variant]:
    return _rows(session, Variant, queries.ALL_VARIANTS)


def find_variant(session: Session, ref: str) -> Variant:
    """`name` (its latest version) or `name@vN` / `name@N`."""
    return pick_variant(ref, lambda name: variants_named(session, name), lambda: all_variants(session))


def chains_of_variant(session: Session, variant_id: int, state: Optional[State] = None) -> list[Chain]:
    stmt = select(Chain).where(Chain.variant_id == variant_id)
    if state is not None:
        stmt = stmt.where(Chain.state == state.value)
    return list(session.scalars(stmt.order_by(Chain.id)))


def next_seq(session: Session) -> int:
    return int(session.scalar(select(func.coalesce(func.max(Chain.seq), 0))) or 0) + 1


def next_repeat(session: Session, variant_id: int) -> int:
    """Repeats count the variant's originally queued chains (re-queued copies keep theirs)."""
    stmt = select(func.count()).select_from(Chain).where(
        Chain.variant_id == variant_id, Chain.requeued_from.is_(None)
    )
    return int(session.scalar(stmt) or 0)


def get_meta(session: Session, key: str) -> Optional[str]:
    return session.execute(text(queries.META_VALUE), {"key": key}).scalar()


def set_meta(session: Session, key: str, value: Optional[str]) -> None:
    row = session.get(Meta, key)
    if value is None:
        if row is not None:
            session.delete(row)
        return
    if row is None:
        session.add(Meta(key=key, value=value))
    else:
        row.value = value


def save_meta(store: Store, key: str, value: Optional[str]) -> None:
    """set_meta in a write transaction of its own."""
    with store.write() as session:
        set_meta(session, key, value)


def latest_worker(session: Session) -> Optional[WorkerRun]:
    got = _rows(session, WorkerRun, queries.LATEST_WORKER)
    return got[0] if got else None


def snapshot_of(session: Session, snapshot_id: Optional[int]) -> Optional[CodeSnapshot]:
    return session.get(CodeSnapshot, snapshot_id) if snapshot_id is not None else None


def counts(session: Session) -> dict[str, int]:
    """Row counts per table (tests and `doctor`-style checks)."""
    out = {}
    for table in SQLModel.metadata.sorted_tables:
        out[table.name] = int(session.scalar(select(func.count()).select_from(table)) or 0)
    return out
