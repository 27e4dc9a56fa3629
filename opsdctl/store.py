"""The store: engine creation, transactions, and the small queries everything else uses.

All access goes through SQLModel/SQLAlchemy, so the same code runs on PostgreSQL. Only for
SQLite URLs do we add: WAL journal (readers never block the writer), a long busy timeout, and
`BEGIN IMMEDIATE` for every write transaction, so a write never has to upgrade a read lock
(the upgrade is what fails with "database is locked" under concurrency; an immediate writer
simply waits its turn). Twenty `opsdctl queue` processes and a worker can write at once.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, Sequence

from sqlalchemy import create_engine, event, func, select
from sqlalchemy.engine import make_url
from sqlmodel import Session, SQLModel

from opsdctl import models
from opsdctl.errors import UserError
from opsdctl.models import Chain, CodeSnapshot, Meta, Score, Stage, TrainStats, Variant, WorkerRun
from opsdctl.states import State

SQLITE_BUSY_TIMEOUT_S = 120.0


class Store:
    def __init__(self, url: str):
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        self.engine = _make_engine(url)
        self._writer = self.engine.execution_options(sqlite_immediate=True)

    @property
    def sqlite_path(self) -> Optional[Path]:
        if not self.is_sqlite:
            return None
        db = make_url(self.url).database
        return Path(db) if db and db != ":memory:" else None

    def safe_url(self) -> str:
        """The URL without its password, for messages and status."""
        return make_url(self.url).render_as_string(hide_password=True)

    @contextmanager
    def write(self) -> Iterator[Session]:
        """One write transaction (BEGIN IMMEDIATE on SQLite); commits on success."""
        with Session(self._writer, expire_on_commit=False) as session:
            yield session
            session.commit()

    @contextmanager
    def read(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as session:
            yield session

    def ensure_schema(self) -> None:
        path = self.sqlite_path
        if path is None:
            SQLModel.metadata.create_all(self.engine)
            return
        if _sqlite_user_version(self.engine) == models.SCHEMA_VERSION:
            return
        from filelock import FileLock

        with FileLock(str(path) + ".init.lock", timeout=SQLITE_BUSY_TIMEOUT_S):
            version = _sqlite_user_version(self.engine)
            if version == models.SCHEMA_VERSION:
                return
            if version not in (0, models.SCHEMA_VERSION):
                raise UserError(
                    f"{path}: store schema version {version} is not {models.SCHEMA_VERSION}; "
                    "this opsdctl cannot read it (upgrade opsdctl or use another db)"
                )
            raw = self.engine.raw_connection()  # outside any transaction: WAL cannot switch inside one
            try:
                raw.driver_connection.execute("PRAGMA journal_mode=WAL")
            finally:
                raw.close()
            with self._writer.begin() as conn:
                SQLModel.metadata.create_all(conn)
                conn.exec_driver_sql(f"PRAGMA user_version = {models.SCHEMA_VERSION}")

    def dispose(self) -> None:
        self.engine.dispose()


def _make_engine(url: str):
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True)
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


def _sqlite_user_version(engine) -> int:
    with engine.connect() as conn:
        return int(conn.exec_driver_sql("PRAGMA user_version").scalar() or 0)


def open_store(db_url: str) -> Store:
    store = Store(db_url)
    store.ensure_schema()
    return store


# --- queries ------------------------------------------------------------------------------


def get_chain(session: Session, chain_id: int) -> Chain:
    chain = session.get(Chain, chain_id)
    if chain is None:
        raise UserError(f"chain {chain_id}: no such chain (see `opsdctl status --all`)")
    return chain


def get_variant(session: Session, variant_id: int) -> Variant:
    return session.get(Variant, variant_id)


def queued_chains(session: Session) -> list[Chain]:
    """Queued chains in run order: higher priority first, then queue order."""
    stmt = (
        select(Chain)
        .where(Chain.state == State.QUEUED.value)
        .order_by(Chain.priority.desc(), Chain.seq, Chain.id)
    )
    return list(session.scalars(stmt))


def chains_in_state(session: Session, state: State) -> list[Chain]:
    return list(session.scalars(select(Chain).where(Chain.state == state.value).order_by(Chain.id)))


def finished_chains(session: Session, limit: Optional[int]) -> list[Chain]:
    stmt = (
        select(Chain)
        .where(Chain.state.not_in([State.QUEUED.value, State.RUNNING.value]))
        .order_by(func.coalesce(Chain.finished_at, Chain.queued_at).desc(), Chain.id.desc())
    )
    if limit is not None:
        stmt = stmt.limit(limit)
    return list(session.scalars(stmt))


def stages_of(session: Session, chain_id: int) -> list[Stage]:
    return list(session.scalars(select(Stage).where(Stage.chain_id == chain_id).order_by(Stage.id)))


def stage_of(session: Session, chain_id: int, name: str) -> Optional[Stage]:
    return session.scalars(select(Stage).where(Stage.chain_id == chain_id, Stage.name == name)).first()


def running_stages(session: Session) -> list[Stage]:
    return list(session.scalars(select(Stage).where(Stage.state == "running").order_by(Stage.id)))


def score_of(session: Session, chain_id: int) -> Optional[Score]:
    return session.scalars(select(Score).where(Score.chain_id == chain_id)).first()


def train_stats_of(session: Session, chain_id: int) -> Optional[TrainStats]:
    return session.scalars(select(TrainStats).where(TrainStats.chain_id == chain_id)).first()


def variants_named(session: Session, name: str) -> list[Variant]:
    return list(session.scalars(select(Variant).where(Variant.name == name).order_by(Variant.version)))


def all_variants(session: Session) -> list[Variant]:
    return list(session.scalars(select(Variant).order_by(Variant.name, Variant.version)))


def find_variant(session: Session, ref: str) -> Variant:
    """`name` (its latest version) or `name@vN` / `name@N`."""
    name, _, ver = ref.partition("@")
    versions = variants_named(session, name)
    if not versions:
        known = sorted({v.name for v in all_variants(session)})
        hint = f"; known: {', '.join(known)}" if known else "; queue a recipe first"
        raise UserError(f"variant {name!r}: not in the store{hint}")
    if not ver:
        return versions[-1]
    try:
        number = int(ver.lstrip("vV"))
    except ValueError:
        raise UserError(f"variant {ref!r}: write NAME or NAME@vN (e.g. {name}@v2)") from None
    for v in versions:
        if v.version == number:
            return v
    raise UserError(
        f"variant {ref!r}: no version {number}; versions: {', '.join(str(v.version) for v in versions)}"
    )


def chains_of_variant(session: Session, variant_id: int, state: Optional[State] = None) -> list[Chain]:
    stmt = select(Chain).where(Chain.variant_id == variant_id)
    if state is not None:
        stmt = stmt.where(Chain.state == state.value)
    return list(session.scalars(stmt.order_by(Chain.id)))


def scored_runs(session: Session, variant_ids: Optional[Sequence[int]] = None) -> list[tuple[Chain, Variant, Score]]:
    """Succeeded chains with their score, for compare/show: (chain, variant, score)."""
    stmt = (
        select(Chain, Variant, Score)
        .join(Variant, Variant.id == Chain.variant_id)
        .join(Score, Score.chain_id == Chain.id)
        .where(Chain.state == State.SUCCEEDED.value)
        .order_by(Variant.name, Variant.version, Chain.id)
    )
    if variant_ids is not None:
        stmt = stmt.where(Chain.variant_id.in_(list(variant_ids)))
    return [tuple(row) for row in session.execute(stmt)]


def next_seq(session: Session) -> int:
    return int(session.scalar(select(func.coalesce(func.max(Chain.seq), 0))) or 0) + 1


def next_repeat(session: Session, variant_id: int) -> int:
    """Repeats count the variant's originally queued chains (re-queued copies keep theirs)."""
    stmt = select(func.count()).select_from(Chain).where(
        Chain.variant_id == variant_id, Chain.requeued_from.is_(None)
    )
    return int(session.scalar(stmt) or 0)


def get_meta(session: Session, key: str) -> Optional[str]:
    row = session.get(Meta, key)
    return row.value if row else None


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


def latest_worker(session: Session) -> Optional[WorkerRun]:
    return session.scalars(select(WorkerRun).order_by(WorkerRun.id.desc()).limit(1)).first()


def snapshot_of(session: Session, snapshot_id: Optional[int]) -> Optional[CodeSnapshot]:
    return session.get(CodeSnapshot, snapshot_id) if snapshot_id is not None else None


def counts(session: Session) -> dict[str, int]:
    """Row counts per table (tests and `doctor`-style checks)."""
    out = {}
    for table in SQLModel.metadata.sorted_tables:
        out[table.name] = int(session.scalar(select(func.count()).select_from(table)) or 0)
    return out


def sqlite_worker_lock_path(store: Store) -> Optional[Path]:
    path = store.sqlite_path
    return Path(str(path) + ".worker.lock") if path else None
