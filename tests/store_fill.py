"""A small store in every chain state, written through the ORM (no worker): for the tests that
read one store through both drivers of opsdctl.store.reader and compare the documents.
`filled` is that store as a fixture, beside the opsdctl.toml that names it."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from conftest import default_config

from opsdctl.store.models import Chain, CodeSnapshot, Meta, Score, Stage, TrainStats, Variant, WorkerRun, utcnow

PROBLEMS = [{"id": f"p{i}", "correct": (i * 7) % 5, "samples": 4} for i in range(12)]


def store_at_base(db) -> None:
    """A SQLite file made by the migrations at BASE, the oldest schema a store can have."""
    import sqlalchemy as sa
    from alembic import command

    from opsdctl.store import migrations

    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        command.upgrade(migrations.alembic_config(conn), migrations.BASE)
    engine.dispose()


def fill_store(store, now=None) -> None:
    """`now`: the time the rows are written around (give two stores the same one to compare them)."""
    now = now or utcnow().replace(microsecond=123456)
    t0 = now - timedelta(hours=5)
    with store.write() as s:
        snaps = [CodeSnapshot(kind="git", key=f"{c}" * 40, commit="c" * 40, head="d" * 40, dirty=i == 1,
                              diffstat=" a.py | 2 +-\n 1 file changed", path=f"/code/{i}", created_at=t0)
                 for i, c in enumerate("ab")]
        s.add_all(snaps)
        variants = [
            Variant(name="baseline", version=1, hash="h1" * 8, hparams={"max_completion_length": 1024}, created_at=t0),
            Variant(name="cosine", version=1, hash="h2" * 8, hparams={"learning_rate": 1e-5}, method={"m": 1},
                    created_at=t0),
            Variant(name="cosine", version=2, hash="h3" * 8, hparams={"max_completion_length": 2048}, created_at=t0),
            Variant(name="token-clip", version=1, hash="h4" * 8, hparams={}, created_at=t0),
            Variant(name="base", version=1, hash="h5" * 8, kind="base", created_at=t0),
        ]
        s.add_all(variants)
        s.flush()
        spec = {"train": {"command": "python -m trainer"}, "eval": {"command": "python -m eval"}}
        n = 0

        def chain(variant, state, **kw):
            nonlocal n
            n += 1
            start = t0 + timedelta(minutes=20 * n)
            done = state not in ("queued", "running")
            c = Chain(variant_id=variant.id, seed=n % 3, repeat=n % 2, seq=n, state=state, profile="tiny",
                      snapshot_id=snaps[n % 2].id, code_dir="/code", stage_spec=spec, commands_hash=f"cmd{n % 2}",
                      queued_at=t0 + timedelta(minutes=n), started_at=None if state == "queued" else start,
                      finished_at=start + timedelta(minutes=15) if done else None, **kw)
            s.add(c)
            s.flush()
            return c

        def stages(c, *, running=False, gpu=None):
            for i, name in enumerate(("train", "eval")):
                last = running and name == "eval"
                s.add(Stage(chain_id=c.id, name=name, state="running" if last else "succeeded", command=f"run {name}",
                            pid=1000 + c.id, gpus="0", log_path=f"/logs/{c.id}/{name}.log", stage_dir=f"/s/{c.id}",
                            started_at=c.started_at + timedelta(minutes=7 * i),
                            finished_at=None if last else c.started_at + timedelta(minutes=7 * i + 6),
                            seconds=None if last else 360.0 + c.id + i, estimate_seconds=400.0, exit_code=None if last else 0,
                            progress={"done": 3, "total": 10, "text": "3/10"} if last else {"step": 10, "max_steps": 10},
                            pids=[1000 + c.id], gpu_peak_mib=gpu, gpu_util_pct=None if gpu is None else 50.0 + c.id,
                            gpu={"attribution": "processes"} if gpu else None))

        def score(c, avg, *, partial=False, k=4, problems=PROBLEMS):
            s.add(Score(chain_id=c.id, k=k, avg_at_k=avg, n_problems=len(problems), problems=problems, partial=partial,
                        seconds=30.5, created_at=c.finished_at))
            s.add(TrainStats(chain_id=c.id, steps=10, final_loss=0.5 + c.id / 100, mean_kl=0.01 * c.id,
                             frac_clipped=None if c.id % 2 else 0.2, step_seconds=1.5, curve=[{"step": 1, "loss": 1.0}],
                             metrics={"entropy": {"mean": 0.3 + c.id / 10, "last": 0.2, "steps": 10}}))

        base, cos1, cos2, clip, untrained = variants
        for i, v in enumerate([base, base, base, cos1, cos1, cos2, clip, clip]):
            c = chain(v, "succeeded")
            stages(c, gpu=1000.0 * (i + 1) if i % 3 else None)
            score(c, 40.0 + 3 * i - (i % 4) * 1.7)
        first = c
        ev = chain(clip, "succeeded", eval_only=True, trained_by=first.id, checkpoint="/ck/final")
        stages(ev)
        score(ev, 47.25)
        part = chain(cos1, "succeeded", eval_problems=6, eval_k=2)
        stages(part)
        score(part, 33.3, partial=True, k=2, problems=[{**p, "correct": min(p["correct"], 2)} for p in PROBLEMS[:6]])
        b = chain(untrained, "succeeded", eval_only=True, checkpoint="base")
        stages(b)
        score(b, 25.0)
        chain(cos2, "failed", reason="train exited 1", stage="train")
        chain(clip, "cancelled", reason="cancelled by the user")
        chain(cos1, "stopped-futile", reason="futile at k=4", stage="eval")
        running = chain(base, "running", stage="eval", worker_pid=4321, worker_host="elsewhere")
        stages(running, running=True)
        chain(clip, "queued", priority=1)
        chain(cos2, "queued", eval_problems=6, eval_k=2)
        chain(base, "queued", priority=5)
        s.add(WorkerRun(pid=4321, host="elsewhere", create_time=123.5, started_at=t0, heartbeat_at=now,
                        activity="running chain", drain=True))
        s.add(Meta(key="budget_clock_started_at", value=repr(t0.timestamp())))
        s.add(Meta(key="planner_plan", value=json.dumps({"policy": "fifo", "at": "2026-01-01T00:00:00+00:00"})))
        s.add(Meta(key="auto_export", value=json.dumps({"path": "/x/recipe.env", "leader": "baseline", "key": "k"})))


@pytest.fixture
def filled(tmp_path):
    """(config, store): a workspace's opsdctl.toml and its store, filled by fill_store."""
    from opsdctl.config import load_config
    from opsdctl.store.engine import open_store

    (tmp_path / "opsdctl.toml").write_text(default_config(budget="hours = 6"))
    cfg = load_config(tmp_path / "opsdctl.toml")
    store = open_store(cfg.db)
    fill_store(store)
    return cfg, store
