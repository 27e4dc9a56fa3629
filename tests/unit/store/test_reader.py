"""The light read path of status and compare (opsdctl.store.reader): the same documents
through stdlib sqlite3 as through SQLAlchemy, the column mirror in step with the models, SQLite
URLs read without SQLAlchemy as SQLAlchemy reads them, and stores that must be created or
upgraded still going through open_store."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import default_config
from store_fill import filled  # noqa: F401  (a fixture)

from opsdctl.store import columns
from opsdctl.store.urls import sqlite_file, sqlite_url

# what moves between two reads a moment apart (clocks), not what the drivers decide
VOLATILE = {"generated_at", "elapsed_seconds", "stage_elapsed_seconds", "seconds_left", "usable_seconds",
            "start_in_s", "end_in_s", "projected_end_in_s", "stalled", "text", "minutes_left", "store"}


def steady(doc):
    if isinstance(doc, dict):
        return {k: steady(v) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [steady(x) for x in doc]
    return doc


def documents(cfg, reader) -> tuple[dict, dict, dict]:
    from opsdctl.cli.documents.compare import compare_document
    from opsdctl.cli.documents.status import gather_status
    from opsdctl.plan.read_context import read_context
    from opsdctl.plan.store_report import compare_doc

    status = gather_status(cfg, reader, None)
    compare = compare_document(cfg, reader).to_json()  # what `compare --json` prints
    some = compare_doc(read_context(cfg, reader), ["cosine@v1", "token-clip"], "baseline", family="since:2000-01-01",
                       pool_code=True).to_json()
    return steady(status), steady(compare), steady(some)


def test_status_and_compare_read_the_same_through_sqlite3_and_sqlalchemy(filled):
    from opsdctl.store.open_read import open_reader
    from opsdctl.store.reader import SqliteDriver

    cfg, store = filled
    light = open_reader(cfg.db)
    assert isinstance(light.driver, SqliteDriver)  # a store at HEAD: no SQLAlchemy
    light_docs, orm_docs = documents(cfg, light), documents(cfg, open_reader(store))
    assert light_docs == orm_docs
    status, compare, _ = light_docs
    states = {c["state"] for c in status["chains"]}
    assert states == {"queued", "running", "succeeded", "failed", "cancelled", "stopped-futile"}
    assert [c["chain_id"] for c in status["chains"] if c["state"] == "queued"] == [18, 16, 17]  # priority, then seq
    assert compare["training"] and compare["baseline"]["n"] == 2  # of 3: the baseline's runs are on two code trees


def run_documents(reader) -> tuple[dict, dict]:
    """`show --json` of every variant and `chain --json` of every chain of the filled store."""
    from opsdctl.cli.documents.chain import chain_doc
    from opsdctl.stats.scores import show_doc

    return ({ref: show_doc(reader, ref) for ref in ("baseline", "cosine@v1", "cosine", "token-clip", "base")},
            {chain_id: steady(chain_doc(reader, chain_id)) for chain_id in range(1, 19)})


def test_show_and_chain_read_the_same_through_sqlite3_and_sqlalchemy(filled):
    """`show`, `chain` and the dashboard's variant and chain pages read a variant's runs through
    the Reader (never an ORM session): the same documents through either driver."""
    from opsdctl.cli.documents.chain import chain_doc
    from opsdctl.stats.scores import show_doc
    from opsdctl.store.open_read import open_reader

    cfg, store = filled
    light = open_reader(cfg.db)
    assert run_documents(light) == run_documents(open_reader(store))
    clip = show_doc(light, "token-clip")["runs"]
    assert [r["chain_id"] for r in clip] == [7, 8, 9, 13, 16]
    trained, evaluated = clip[1], clip[2]  # chain 9 evaluates chain 8's checkpoint: its training is 8's
    assert evaluated["eval_only"] and evaluated["trained_by"] == 8 and evaluated["train"] == trained["train"]
    assert evaluated["problems"][0] == {"id": "p0", "correct": 0, "samples": 4} and evaluated["code"]["dirty"] is False
    assert trained["gpu"]["train"] == {"attribution": "processes", "peak_mib": 8000.0, "util_pct": 58.0}
    assert chain_doc(light, 9)["run"] == evaluated


def test_in_lists_are_read_a_chunk_at_a_time(filled):
    """SQLite binds at most 999 parameters (before 3.32): an IN-list of more ids is split."""
    from opsdctl.store import queries
    from opsdctl.store.open_read import open_reader

    chunks = list(queries.in_chunks(queries.CODE_SNAPSHOTS, list(range(1, 2001))))
    assert [len(params) for _, params in chunks] == [900, 900, 200]
    assert chunks[2][0].endswith("IN (:in0, :in1, " + ", ".join(f":in{i}" for i in range(2, 200)) + ")")
    cfg, store = filled
    for reader in (open_reader(cfg.db), open_reader(store)):
        assert sorted(x.id for x in reader.rows_in(queries.CODE_SNAPSHOTS, range(1, 2001))) == [1, 2]
        assert reader.rows_in(queries.CODE_SNAPSHOTS, []) == []


def test_column_mirror_matches_the_models():
    from sqlalchemy import JSON, Boolean
    from sqlmodel import SQLModel

    from opsdctl.store import models

    kinds = {columns.JSON: JSON, columns.DATETIME: models.UTCDateTime, columns.BOOL: Boolean}
    mirrors = {columns.JSON: columns.JSON_COLUMNS, columns.DATETIME: columns.DATETIME_COLUMNS,
               columns.BOOL: columns.BOOL_COLUMNS}
    seen: dict[str, str] = {}
    for table in SQLModel.metadata.sorted_tables:
        for column in table.columns:
            kind = next((k for k, t in kinds.items() if isinstance(column.type, t)), None)
            for k, mirror in mirrors.items():
                listed = column.name in mirror.get(table.name, ())
                assert listed == (kind == k), f"{table.name}.{column.name}: columns.py disagrees with models.py"
            # the reader decodes by column name: one name, one kind, in every table
            assert seen.setdefault(column.name, kind) == kind, f"{column.name} means two kinds"
    names = {t.name for t in SQLModel.metadata.sorted_tables}
    for mirror in mirrors.values():
        assert set(mirror) <= names


@pytest.mark.parametrize("url", ["sqlite:///runs.db", "sqlite:////tmp/a b/x.db", "sqlite:///~/r-1_2.db",
                                 "sqlite:////tmp/a%20b/x.db", "sqlite:////tmp/a@b.db", "sqlite:///:memory:",
                                 "sqlite://", "sqlite:///x.db?timeout=3", "postgresql://u@h/db"])
def test_plain_sqlite_urls_read_as_sqlalchemy_reads_them(url):
    from sqlalchemy.engine import make_url

    path = sqlite_file(url)
    if path is not None:  # recognised: exactly SQLAlchemy's reading, and back again
        parsed = make_url(url)
        assert parsed.get_backend_name() == "sqlite" and not parsed.query and parsed.database == path
        assert sqlite_url(path) == url == parsed.render_as_string(hide_password=True)


def test_config_resolves_a_sqlite_url_as_before(tmp_path):
    from sqlalchemy.engine import make_url

    from opsdctl.config import load_config

    (tmp_path / "opsdctl.toml").write_text(default_config().replace('"sqlite:///runs.db"', '"sqlite:///sub/runs.db"'))
    db = load_config(tmp_path / "opsdctl.toml").db
    want = make_url("sqlite:///x").set(database=str((tmp_path / "sub" / "runs.db").resolve()))
    assert db == want.render_as_string(hide_password=False)


def test_a_store_to_create_still_goes_through_open_store(tmp_path):
    from opsdctl.store.open_read import open_reader
    from opsdctl.store.reader import SqlAlchemyDriver

    db = tmp_path / "new" / "runs.db"
    reader = open_reader(f"sqlite:///{db}")  # no file yet: created and brought to HEAD, as before
    assert isinstance(reader.driver, SqlAlchemyDriver) and db.stat().st_size > 0
    assert reader.queued_chains() == [] and reader.latest_worker() is None
    assert not isinstance(open_reader(f"sqlite:///{db}").driver, SqlAlchemyDriver)  # at HEAD now: sqlite3


def test_an_empty_or_foreign_file_is_refused_as_before(tmp_path):
    import sqlite3

    from opsdctl.errors import UserError
    from opsdctl.store.open_read import open_reader

    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(UserError, match="the file is empty"):
        open_reader(f"sqlite:///{empty}")
    foreign = tmp_path / "foreign.db"
    con = sqlite3.connect(foreign)
    con.execute("create table songs (x)")
    con.commit()
    con.close()
    with pytest.raises(UserError, match="another program's tables"):
        open_reader(f"sqlite:///{foreign}")
    assert Path(foreign).stat().st_size > 0


def test_a_store_at_an_older_revision_is_upgraded_before_it_is_read(tmp_path):
    from store_fill import store_at_base

    from opsdctl.store import migrations
    from opsdctl.store.open_read import open_reader
    from opsdctl.store.reader import SqlAlchemyDriver, SqliteDriver

    db = tmp_path / "base.db"
    store_at_base(db)
    reader = open_reader(f"sqlite:///{db}")  # not at HEAD: open_store upgrades it first, as before
    assert isinstance(reader.driver, SqlAlchemyDriver) and reader.all_variants() == []
    again = open_reader(f"sqlite:///{db}")
    assert isinstance(again.driver, SqliteDriver) and again.value(f"SELECT version_num FROM {migrations.VERSION_TABLE}") \
        == migrations.HEAD
