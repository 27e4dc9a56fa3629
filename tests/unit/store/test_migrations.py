"""Schema migrations (opsdctl/store/migrations): the models and the migration head agree (so a schema
change without a revision fails here), a fresh store is created by the migrations, a store made
by the pre-migration code (create_all, no alembic_version) is upgraded in place without losing a
row, and a newer or foreign store is refused in one line."""

from __future__ import annotations

import datetime as dt
import sqlite3

import pytest
import sqlalchemy as sa
from sqlmodel import SQLModel
from support.legacy_store import PROBLEMS, T0, make_legacy_store, table_counts

from opsdctl.errors import UserError
from opsdctl.store import migrations, queries
from opsdctl.store.engine import (
    Store,
    open_store,
    queued_chains,
    stages_of,
)
from opsdctl.store.models import Chain, Score, Stage, Variant
from opsdctl.store.open_read import open_reader


def test_head_constant_matches_the_scripts():
    assert migrations.script_head() == migrations.HEAD
    assert migrations.known_revisions()[-1] == migrations.BASE  # walk_revisions goes head -> base


def test_models_and_migrations_agree(tmp_path):
    """A model change without a revision (or a revision that does not match the models) fails here."""
    store = open_store(f"sqlite:///{tmp_path / 'fresh.db'}")
    assert store.revision() == migrations.HEAD
    with store.engine.connect() as conn:
        assert migrations.schema_diff(conn) == []
    # the check does see a change: a model with one column more than the migrations made
    extra = sa.MetaData()
    for table in SQLModel.metadata.sorted_tables:
        table.to_metadata(extra)
    extra.tables["chain"].append_column(sa.Column("added_later", sa.Integer, nullable=True))
    with store.engine.connect() as conn:
        diff = migrations.schema_diff(conn, extra)
    assert [(d[0], d[3].name) for d in diff] == [("add_column", "added_later")]


def test_pre_migration_sqlite_store_is_upgraded_in_place(tmp_path):
    db = tmp_path / "runs.db"
    before = make_legacy_store(db)
    assert before["chain"] == 3 and before["stage"] == 2
    store = open_store(f"sqlite:///{db}")
    assert store.revision() == migrations.HEAD
    after = table_counts(db)
    assert after == {**before, "outbox": 0}  # not one row lost or added; the later tables start empty
    with store.engine.connect() as conn:
        assert migrations.schema_diff(conn) == []  # and the upgraded tables are exactly the models'
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    with store.read() as s:
        c1 = s.get(Chain, 1)
        assert (c1.state, c1.worker_host, c1.node_id) == ("succeeded", "gpu1", None)
        assert c1.started_at == T0.replace(tzinfo=dt.timezone.utc)
        assert c1.finished_at - c1.started_at == dt.timedelta(minutes=43)
        assert s.get(Variant, 1).hparams == {"learning_rate": 5e-6}
        assert [q.id for q in queued_chains(s)] == [3]
        (run,) = open_reader(store).rows(queries.SCORED_ROWS)  # compare's read of the scored runs
        assert (run.id, run.label, run.avg_at_k) == (1, "baseline", 54.22)
        assert s.get(Score, run.score_id).problems == PROBLEMS
        # 0003 filled the compact counts of the rows it found (compare reads those)
        assert run.counts == ",".join(str(p["correct"]) for p in PROBLEMS) and len(run.problem_set) == 16
        assert [st.progress for st in stages_of(s, 1)] == [{"done": 100, "total": 100, "text": "step 100/100"}, None]
        assert s.get(Stage, 1).pids == [100, 101]
    # the upgraded store takes new rows, including the new column
    with store.write() as s:
        s.get(Chain, 3).node_id = "abc123"
        s.add(Score(chain_id=2, k=4, avg_at_k=50.0, n_problems=15, partial=True))
    with store.read() as s:
        assert s.get(Chain, 3).node_id == "abc123"
        assert s.get(Score, 2).counts is None  # no per-problem counts: nothing to compact
    # opening again is the fast path: nothing left to do
    assert Store(f"sqlite:///{db}").revision() == migrations.HEAD
    assert open_store(f"sqlite:///{db}").revision() == migrations.HEAD


def test_store_at_the_first_revision_is_upgraded(tmp_path):
    """A store made by migrations at BASE (not by create_all) takes the later revisions too."""
    from store_fill import store_at_base

    db = tmp_path / "base.db"
    store_at_base(db)
    store = open_store(f"sqlite:///{db}")
    assert store.revision() == migrations.HEAD
    with store.engine.connect() as conn:
        assert migrations.schema_diff(conn) == []


def test_newer_or_foreign_store_is_refused_in_one_line(tmp_path):
    db = tmp_path / "newer.db"
    open_store(f"sqlite:///{db}")
    con = sqlite3.connect(db)
    con.execute("update alembic_version set version_num = '0099_from_the_future'")
    con.commit()
    con.close()
    with pytest.raises(UserError) as err:
        open_store(f"sqlite:///{db}")
    msg = str(err.value)
    assert "\n" not in msg and "0099_from_the_future" in msg and "upgrade opsdctl" in msg
    # some of our tables, no version table: not ours to touch
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("create table chain (id integer primary key)")
    con.commit()
    con.close()
    with pytest.raises(UserError) as err:
        open_store(f"sqlite:///{other}")
    assert "not a store this opsdctl can upgrade" in str(err.value)
    assert table_counts(other) == {"chain": 0}


def test_outbox_revision_upgrades_a_store_of_the_previous_revision(tmp_path):
    """0008 adds the outbox to a store at 0007 without touching its rows; a chain's end then records its event."""
    from alembic import command

    from opsdctl.store.states import State, transition

    db = tmp_path / "runs.db"
    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        command.upgrade(migrations.alembic_config(conn), "0007_chain_stage_spec")
    with engine.begin() as conn:  # plain SQL: the models describe the newest revision's tables
        _old_rows(conn)
    engine.dispose()
    store = open_store(f"sqlite:///{db}")
    assert store.revision() == migrations.HEAD
    with store.read() as s:
        assert s.get(Chain, 1).state == "running" and s.get(Variant, 1).name == "baseline"
    with store.write() as s:
        assert transition(s, 1, State.RUNNING, State.FAILED, reason="exit 3")
        assert not transition(s, 1, State.RUNNING, State.FAILED)  # lost race: no second event
    con = sqlite3.connect(db)
    assert con.execute("select key, kind from outbox").fetchall() == [("chain:1:failed", "chain.failed")]
    con.close()


def _old_rows(conn) -> None:
    """A variant and a running chain, written with the columns every revision has."""
    conn.execute(sa.text("INSERT INTO variant (id, name, version, hash, description, hparams, method, source, kind, "
                         "created_at) VALUES (1, 'baseline', 1, 'h', '', '{}', '{}', '', 'recipe', '2026-01-01')"))
    conn.execute(sa.text("INSERT INTO chain (id, variant_id, seed, repeat, priority, seq, state, profile, code_dir, "
                         "eval_only, queued_at) VALUES (1, 1, 0, 0, 0, 1, 'running', 'tiny', '', 0, '2026-01-01')"))


def test_eval_draw_revision_gives_old_chains_the_first_draw(tmp_path):
    """0009 adds chain.eval_draw to a store at 0008: every existing chain is its checkpoint's first draw (0)."""
    from alembic import command

    db = tmp_path / "runs.db"
    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        command.upgrade(migrations.alembic_config(conn), "0008_notify_outbox")
        _old_rows(conn)
    engine.dispose()
    store = open_store(f"sqlite:///{db}")
    assert store.revision() == migrations.HEAD
    with store.read() as s:
        assert s.get(Chain, 1).eval_draw == 0
