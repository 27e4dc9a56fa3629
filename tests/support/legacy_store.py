"""A store as the pre-migration opsdctl left it (create_all, no alembic_version, WAL, rows), for the
migration tests: the tables are a frozen copy, never imported from the models."""

from __future__ import annotations

import datetime as dt
import sqlite3

import sqlalchemy as sa

UTC = sa.DateTime(timezone=True)
S = sa.String
legacy = sa.MetaData()
sa.Table(
    "variant", legacy,
    sa.Column("id", sa.Integer, primary_key=True), sa.Column("name", S, nullable=False, index=True),
    sa.Column("version", sa.Integer, nullable=False), sa.Column("hash", S, nullable=False, index=True),
    sa.Column("description", S, nullable=False), sa.Column("hparams", sa.JSON, nullable=False),
    sa.Column("method", sa.JSON, nullable=False), sa.Column("source", S, nullable=False),
    sa.Column("created_at", UTC, nullable=False),
    sa.UniqueConstraint("name", "version", name="uq_variant_name_version"),
)
sa.Table(
    "code_snapshot", legacy,
    sa.Column("id", sa.Integer, primary_key=True), sa.Column("kind", S, nullable=False),
    sa.Column("key", S, nullable=False), sa.Column("commit", S), sa.Column("head", S),
    sa.Column("dirty", sa.Boolean, nullable=False), sa.Column("diffstat", sa.Text, nullable=False),
    sa.Column("source_dir", S, nullable=False), sa.Column("prefix", S, nullable=False),
    sa.Column("path", S, nullable=False), sa.Column("created_at", UTC, nullable=False),
    sa.UniqueConstraint("kind", "key", "prefix", name="uq_snapshot_kind_key"),
)
sa.Table(
    "chain", legacy,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("variant_id", sa.Integer, sa.ForeignKey("variant.id"), nullable=False, index=True),
    sa.Column("seed", sa.Integer, nullable=False), sa.Column("repeat", sa.Integer, nullable=False),
    sa.Column("priority", sa.Integer, nullable=False), sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("state", S, nullable=False, index=True), sa.Column("stage", S), sa.Column("reason", S),
    sa.Column("profile", S, nullable=False),
    sa.Column("snapshot_id", sa.Integer, sa.ForeignKey("code_snapshot.id")),
    sa.Column("code_dir", S, nullable=False), sa.Column("requeued_from", sa.Integer, sa.ForeignKey("chain.id")),
    sa.Column("worker_pid", sa.Integer), sa.Column("worker_host", S),
    sa.Column("queued_at", UTC, nullable=False), sa.Column("started_at", UTC), sa.Column("finished_at", UTC),
)
sa.Table(
    "stage", legacy,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("chain_id", sa.Integer, sa.ForeignKey("chain.id"), nullable=False, index=True),
    sa.Column("name", S, nullable=False), sa.Column("state", S, nullable=False),
    sa.Column("command", sa.Text, nullable=False), sa.Column("cwd", S, nullable=False),
    sa.Column("token", S, nullable=False), sa.Column("host", S, nullable=False), sa.Column("pid", sa.Integer),
    sa.Column("pgid", sa.Integer), sa.Column("create_time", sa.Float), sa.Column("gpus", S, nullable=False),
    sa.Column("log_path", S, nullable=False), sa.Column("stage_dir", S, nullable=False),
    sa.Column("checkpoint", S), sa.Column("started_at", UTC, nullable=False), sa.Column("finished_at", UTC),
    sa.Column("exit_code", sa.Integer), sa.Column("estimate_seconds", sa.Float), sa.Column("seconds", sa.Float),
    sa.Column("reason", S), sa.Column("progress", sa.JSON(none_as_null=True)),
    sa.Column("pids", sa.JSON(none_as_null=True)),
    sa.UniqueConstraint("chain_id", "name", name="uq_stage_chain_name"),
)
sa.Table(
    "score", legacy,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("chain_id", sa.Integer, sa.ForeignKey("chain.id"), nullable=False, index=True, unique=True),
    sa.Column("k", sa.Integer, nullable=False), sa.Column("avg_at_k", sa.Float, nullable=False),
    sa.Column("n_problems", sa.Integer, nullable=False), sa.Column("n_correct", sa.Integer),
    sa.Column("n_samples", sa.Integer), sa.Column("problems", sa.JSON(none_as_null=True)),
    sa.Column("partial", sa.Boolean, nullable=False), sa.Column("seconds", sa.Float),
    sa.Column("source", S, nullable=False), sa.Column("created_at", UTC, nullable=False),
)
sa.Table(
    "train_stats", legacy,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("chain_id", sa.Integer, sa.ForeignKey("chain.id"), nullable=False, index=True, unique=True),
    sa.Column("steps", sa.Integer), sa.Column("final_loss", sa.Float), sa.Column("mean_kl", sa.Float),
    sa.Column("frac_clipped", sa.Float), sa.Column("step_seconds", sa.Float), sa.Column("rollout_seconds", sa.Float),
    sa.Column("peak_mem_mib", sa.Float), sa.Column("train_runtime", sa.Float),
    sa.Column("curve", sa.JSON(none_as_null=True)), sa.Column("source", S, nullable=False),
)
sa.Table(
    "worker_run", legacy,
    sa.Column("id", sa.Integer, primary_key=True), sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("host", S, nullable=False), sa.Column("create_time", sa.Float),
    sa.Column("started_at", UTC, nullable=False), sa.Column("heartbeat_at", UTC, nullable=False),
    sa.Column("stopped_at", UTC), sa.Column("exit_reason", S), sa.Column("activity", S, nullable=False),
    sa.Column("drain", sa.Boolean, nullable=False),
)
sa.Table(
    "transition", legacy,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("chain_id", sa.Integer, sa.ForeignKey("chain.id"), nullable=False, index=True),
    sa.Column("at", UTC, nullable=False), sa.Column("from_state", S, nullable=False),
    sa.Column("to_state", S, nullable=False), sa.Column("reason", S),
)
sa.Table("meta", legacy, sa.Column("key", S, primary_key=True), sa.Column("value", S, nullable=False))

T0 = dt.datetime(2025, 6, 1, 12, 0, 0)  # naive UTC, as the old code stored it on SQLite
PROBLEMS = [{"id": "2024-I-1", "correct": 7, "samples": 12}, {"id": "2024-I-2", "correct": 0, "samples": 12}]


def make_legacy_store(path) -> dict[str, int]:
    """A runs.db as the pre-migration opsdctl left it: create_all, user_version 1, WAL, rows."""
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        legacy.create_all(conn)
        conn.exec_driver_sql("PRAGMA user_version = 1")
        t = legacy.tables

        def insert(table, rows):  # one by one: the rows leave different columns to their defaults
            for row in rows:
                conn.execute(table.insert(), row)

        insert(t["variant"], [
            dict(id=1, name="baseline", version=1, hash="a" * 64, description="released recipe",
                 hparams={"learning_rate": 5e-6}, method={"clip_mode": "entry"}, source="recipes/baseline.toml",
                 created_at=T0),
            dict(id=2, name="token-clip", version=1, hash="b" * 64, description="", hparams={},
                 method={"clip_mode": "token"}, source="recipes/token-clip.toml", created_at=T0),
        ])
        insert(t["code_snapshot"], [dict(id=1, kind="git", key="c" * 40, commit="d" * 40, head="e" * 40,
                                                        dirty=True, diffstat=" a.py | 2 +-", source_dir="/code",
                                                        prefix="", path="/runs/.code/c", created_at=T0)])
        insert(t["chain"], [
            dict(id=1, variant_id=1, seed=0, repeat=0, priority=0, seq=1, state="succeeded", stage="eval",
                 profile="tiny", snapshot_id=1, code_dir="/runs/.code/c", worker_pid=11, worker_host="gpu1",
                 queued_at=T0, started_at=T0, finished_at=T0 + dt.timedelta(minutes=43)),
            dict(id=2, variant_id=2, seed=1, repeat=0, priority=5, seq=2, state="interrupted", stage="train",
                 reason="worker (pid 11) died during train", profile="tiny", snapshot_id=1, code_dir="/runs/.code/c",
                 queued_at=T0, started_at=T0, finished_at=T0),
            dict(id=3, variant_id=2, seed=1, repeat=0, priority=5, seq=2, state="queued", profile="tiny",
                 snapshot_id=1, code_dir="/runs/.code/c", requeued_from=2, queued_at=T0),
        ])
        insert(t["stage"], [
            dict(id=1, chain_id=1, name="train", state="succeeded", command="python -m trainer", cwd="/code",
                 token="t1", host="gpu1", pid=100, pgid=100, create_time=1.5, gpus="0,1,2,3", log_path="/l",
                 stage_dir="/s", checkpoint="/s/checkpoint-final", started_at=T0, finished_at=T0, exit_code=0,
                 seconds=1000.0, progress={"done": 100, "total": 100, "text": "step 100/100"}, pids=[100, 101]),
            dict(id=2, chain_id=1, name="eval", state="succeeded", command="python -m eval", cwd="/code", token="t2",
                 host="gpu1", gpus="0,1,2,3", log_path="/l2", stage_dir="/s2", started_at=T0, exit_code=0),
        ])
        insert(t["score"], [dict(id=1, chain_id=1, k=12, avg_at_k=54.22, n_problems=30, n_correct=195,
                                                n_samples=360, problems=PROBLEMS, partial=False, seconds=1534.2,
                                                source="result.json", created_at=T0)])
        insert(t["train_stats"], [dict(id=1, chain_id=1, steps=100, final_loss=-0.0079,
                                                      curve=[{"step": 1, "loss": -0.001}], source="log")])
        insert(t["worker_run"], [dict(id=1, pid=11, host="gpu1", started_at=T0, heartbeat_at=T0,
                                                     activity="", drain=False)])
        insert(t["transition"], [dict(id=1, chain_id=1, at=T0, from_state="queued", to_state="running"),
                                                dict(id=2, chain_id=1, at=T0, from_state="running",
                                                     to_state="succeeded")])
        insert(t["meta"], [dict(key="budget_clock_started_at", value="1748779200.0")])
    engine.dispose()
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.close()
    return table_counts(path)


def table_counts(path) -> dict[str, int]:
    con = sqlite3.connect(path)
    try:
        names = [r[0] for r in con.execute("select name from sqlite_master where type = 'table'")]
        return {n: con.execute(f'select count(*) from "{n}"').fetchone()[0] for n in names if n != "alembic_version"}
    finally:
        con.close()
