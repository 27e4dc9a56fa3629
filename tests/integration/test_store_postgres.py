"""The store on a real PostgreSQL server (OPSDCTL_TEST_PG_URL, e.g. from `.ci/postgres.sh`): the
queue -> worker -> status round trip through the same SQLModel code, concurrent queues while a
worker runs, the advisory lock (one worker per store, released when its holder dies, then crash
recovery), migrations (fresh, pre-migration, concurrent first opens), and credentials that never
show up in any output, error paths included.

Unset, these tests skip with the reason; set but unreachable, they fail. Each test gets a database
of its own (created and dropped here: the role needs CREATEDB)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest
import sqlalchemy as sa
from support.gpus import h100, write_gpus
from conftest import clean_env, default_config, opsdctl_argv, pid_alive, stop_process, wait_for
from sqlalchemy.engine import make_url

from opsdctl.config import load_config
from opsdctl.errors import UserError
from opsdctl.store import migrations
from opsdctl.store.engine import Store, open_store, redact
from opsdctl.store.locks import WorkerBusy, worker_lock

pytestmark = pytest.mark.postgres
PG_ENV = "OPSDCTL_TEST_PG_URL"
LONG_TRAIN = {"FAKE_STEPS": "4000", "FAKE_STEP_SECONDS": "0.05", "FAKE_CHILD": "1"}


@pytest.fixture(scope="session")
def pg_admin():
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(f'{PG_ENV} is not set (eval "$(.ci/postgres.sh)" starts a local server and sets it)')
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 10})
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except Exception as exc:
        pytest.fail(f"{PG_ENV} is set but its server is unreachable: {redact(str(exc).splitlines()[0], url)}",
                    pytrace=False)
    yield engine
    engine.dispose()


@pytest.fixture
def pg_url(pg_admin):
    """A fresh database for one test; its URL (password included, as a user would write it)."""
    name = f"opsdctl_t_{uuid.uuid4().hex[:12]}"
    with pg_admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    yield make_url(os.environ[PG_ENV]).set(database=name).render_as_string(hide_password=False)
    with pg_admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def secret() -> str:
    password = make_url(os.environ[PG_ENV]).password
    assert password and len(password) >= 8, "the test role needs a real password"
    return password


def pg_workspace(ws, url: str, **kw):
    config = default_config(**kw).replace('db = "sqlite:///runs.db"', f"db = {json.dumps(url)}")
    ws.write_config(config)
    return ws


def pg_count(url: str, query: str):
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.exec_driver_sql(query).fetchall()
    finally:
        engine.dispose()


def assert_no_secret(*texts: str) -> None:
    for t in texts:
        assert secret() not in t, t


def test_queue_worker_status_round_trip(ws, pg_url):
    pg_workspace(ws, pg_url)
    out = [ws.cli("queue", "baseline", "token-clip", "--repeats", "2")]
    worker = ws.run("worker", "--drain")  # a real worker process on the PostgreSQL store
    out.append(worker)
    doc = ws.status()
    chains = doc["chains"]
    assert len(chains) == 4 and {c["state"] for c in chains} == {"succeeded"}, chains
    assert all(c["score"] is not None for c in chains)
    assert doc["store"].startswith("postgresql+psycopg://") and "***" in doc["store"]
    assert doc["worker"]["state"] == "stopped"
    shown = ws.cli("status")
    exported = ws.cli("export-recipe", "baseline", "-o", str(ws.root / "recipe.env"), "--all-keys")
    out += [shown, exported]
    assert "learning_rate=" in (ws.root / "recipe.env").read_text()
    for p in out:
        assert_no_secret(p.stdout, p.stderr)
    assert "***" in worker.stdout  # the worker names its store, masked
    # the schema came from the migrations and matches the models on PostgreSQL too
    store = Store(pg_url)
    assert store.revision() == migrations.HEAD
    with store.engine.connect() as conn:
        assert migrations.schema_diff(conn) == []
    assert pg_count(pg_url, "select count(*) from transition") == [(8,)]


def test_four_chains_at_once_write_one_postgres_store(ws, pg_url, tmp_path):
    """gpus_per_chain = 1 on four fake GPUs: four chains run in the worker's threads at once, each
    writing its stages, transitions and score through its own sessions of one PostgreSQL store."""
    gpus = tmp_path / "gpus.json"
    write_gpus(gpus, [h100(i) for i in range(4)])
    pg_workspace(ws, pg_url, extra="gpus_per_chain = 1")
    config = ws.root / "opsdctl.toml"
    config.write_text(config.read_text().replace("[gpus]\ndevices = []", "[gpus]\ndevices = [0, 1, 2, 3]\nmin_free_mib = 1000"))
    ws.env["OPSDCTL_GPU_PROBE"] = f"fake:{gpus}"
    ws.cli("queue", "baseline", "token-clip", "--repeats", "2")
    worker = ws.run("worker", "--drain", env={"FAKE_STEP_SECONDS": "0.3"})
    assert "up to 4 chains at once in 4 slot(s) of 1 GPU(s): 0, 1, 2, 3" in worker.stdout, worker.stdout
    chains = ws.status()["chains"]
    assert len(chains) == 4 and {c["state"] for c in chains} == {"succeeded"}, chains
    assert all(c["score"] is not None for c in chains)
    spans = pg_count(pg_url, "SELECT min(started_at), max(finished_at) FROM stage WHERE name = 'train' GROUP BY chain_id")
    assert max(a for a, _ in spans) < min(b for _, b in spans), spans  # the four trains overlapped
    assert sorted(g for (g,) in pg_count(pg_url, "SELECT gpus FROM stage WHERE name = 'train'")) == ["0", "1", "2", "3"]
    assert pg_count(pg_url, "SELECT count(*) FROM score") == [(4,)]
    # every chain's states in order, none lost to another thread's write
    per_chain = pg_count(pg_url, "SELECT chain_id, count(*) FROM transition GROUP BY chain_id ORDER BY chain_id")
    assert len(per_chain) == 4 and len({n for _, n in per_chain}) == 1, per_chain


def test_concurrent_queues_while_a_worker_runs(ws, pg_url):
    n = 6
    pg_workspace(ws, pg_url)
    ws.cli("queue", "baseline")
    worker = ws.popen("worker")
    try:
        wait_for(lambda: pg_count(pg_url, "select count(*) from stage")[0][0] > 0, 60, what="a stage")
        queuers = [ws.popen("queue", "baseline", "--json") for _ in range(n)]
        readers = [ws.popen("status", "--json") for _ in range(2)]
        for p in queuers + readers:
            text, _ = p.communicate(timeout=180)
            assert p.returncode == 0, text
            assert_no_secret(text)
        rows = pg_count(pg_url, "select repeat, seed from chain order by id")
        assert len(rows) == n + 1
        assert sorted(r[0] for r in rows) == list(range(n + 1))  # writers took turns: no repeat twice
        assert len({r[1] for r in rows}) == n + 1
        assert pg_count(pg_url, "select count(*) from variant") == [(1,)]
    finally:
        stop_process(worker)
    assert_no_secret(worker.stdout.read())
    states = dict(pg_count(pg_url, "select state, count(*) from chain group by state"))
    # a worker stop re-queues the chain it was running as a fresh row (requeued_from): count the originals
    originals = pg_count(pg_url, "select count(*) from chain where requeued_from is null")[0][0]
    requeued = pg_count(pg_url, "select count(*) from chain where requeued_from is not null")[0][0]
    assert requeued == states.get("interrupted", 0) <= 1, states
    assert set(states) <= {"succeeded", "queued", "interrupted"} and originals == n + 1, states
    assert states.get("succeeded", 0) >= 1


def test_advisory_lock_one_worker_per_store_then_recovery(ws, pg_url):
    pg_workspace(ws, pg_url)
    ws.cli("queue", "baseline")
    # in-process: two holders of one store
    store_a, store_b = open_store(pg_url), open_store(pg_url)
    cfg = load_config(ws.root / "opsdctl.toml")
    with worker_lock(cfg, store_a) as held:
        assert held.kind == "advisory" and held.store_wide and "***" in held.where
        with pytest.raises(WorkerBusy) as busy:
            with worker_lock(cfg, store_b):
                pass
        assert f"pid {os.getpid()} on " in str(busy.value) and secret() not in str(busy.value)
    with worker_lock(cfg, store_b):  # released with its session
        pass
    # a real worker holds it; a second one is refused in one line naming the holder
    worker = ws.popen("worker", env=LONG_TRAIN)
    try:
        wait_for(lambda: pg_count(pg_url, "select pid from stage where name = 'train' and pid is not null"),
                 60, what="the train stage")
        leader = pg_count(pg_url, "select pid from stage where name = 'train'")[0][0]
        second = ws.run("worker", "--drain", check=False)
        assert second.returncode == 3, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and f"pid {worker.pid} on " in lines[0] and "another worker" in lines[0], lines
        assert_no_secret(second.stdout, second.stderr)
        worker.send_signal(signal.SIGKILL)  # its session dies with it, and the lock with the session
        worker.wait(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert pid_alive(leader)  # the orphaned stage
    out = ws.run("worker", "--drain")
    assert "re-queued as chain 2" in out.stdout
    assert not pid_alive(leader)
    assert pg_count(pg_url, "select id, state, requeued_from from chain order by id") == [
        (1, "interrupted", None), (2, "succeeded", 1)]
    assert pg_count(pg_url, "select count(*) from chain where state = 'running'") == [(0,)]


def test_credentials_never_printed(ws, pg_url, monkeypatch):
    pw = secret()
    url = make_url(pg_url)
    outputs = []
    # a wrong password, a closed port, a missing database: one line each, exit 2, no password
    # (in-process CLI for most calls: the same entry point and output, without the start-up cost)
    for bad in (url.set(password=pw[::-1] + "x"), url.set(port=1), url.set(database="no_such_db_opsdctl")):
        pg_workspace(ws, bad.render_as_string(hide_password=False))
        for args in (("status",), ("queue", "baseline"), ("worker", "--drain")):
            run = ws.run if args[0] == "worker" and bad.port != 1 else ws.cli
            p = run(*args, check=False)
            assert p.returncode == 2, (args, p.stdout, p.stderr)
            lines = p.stderr.strip().splitlines()
            assert len(lines) == 1 and "***" in lines[0], lines
            outputs.append(p)
    assert any("password authentication failed" in p.stderr for p in outputs)
    # an unparseable URL in the config
    ws.write_config(default_config().replace('db = "sqlite:///runs.db"', f'db = "postgresql+psycopg//opsdctl:{pw}@x/y"'))
    p = ws.cli("status", check=False)
    assert p.returncode == 2 and "not a database URL" in p.stderr
    outputs.append(p)
    # the password from the environment (libpq's PGPASSWORD), not the URL: works, never shown
    no_pw = url._replace(password=None).render_as_string(hide_password=False)
    assert pw not in no_pw
    pg_workspace(ws, no_pw)
    env = {"PGPASSWORD": pw}
    outputs.append(ws.cli("queue", "baseline", env=env))
    outputs.append(ws.run("worker", "--drain", env=env))
    st = ws.cli("status", "--json", env=env)
    outputs.append(st)
    assert json.loads(st.stdout)["chains"][0]["state"] == "succeeded"
    outputs.append(ws.cli("status", env={"PGPASSWORD": pw[::-1] + "x"}, check=False))
    assert outputs[-1].returncode == 2
    for p in outputs:
        assert_no_secret(p.stdout, p.stderr)
    # in-process: the Store's own text and its error path
    store = Store(pg_url)
    assert pw not in repr(store) and pw not in store.safe_url()
    monkeypatch.setenv("PGPASSWORD", "x")  # too short to redact blindly: only the URL's password is
    with pytest.raises(UserError) as err:
        open_store(url.set(port=1).render_as_string(hide_password=False))
    assert pw not in str(err.value) and "***" in str(err.value)
    assert redact(f"boom {pw} boom", pg_url) == "boom *** boom"


def test_migrations_on_postgres(pg_url):
    """A pre-migration store (create_all, no alembic_version) and concurrent first opens."""
    from support.legacy_store import T0, legacy

    engine = sa.create_engine(pg_url)
    with engine.begin() as conn:
        legacy.create_all(conn)
        conn.execute(legacy.tables["variant"].insert(), dict(id=1, name="baseline", version=1, hash="a" * 64,
                     description="", hparams={}, method={}, source="", created_at=T0))
        conn.execute(legacy.tables["chain"].insert(), dict(id=1, variant_id=1, seed=0, repeat=0, priority=0, seq=1,
                     state="succeeded", profile="tiny", code_dir="/c", queued_at=T0))
    engine.dispose()
    code = textwrap.dedent("""
        import sys
        from opsdctl.store.engine import open_store
        print(open_store(sys.argv[1]).revision())
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code, pg_url], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 3, [o[1] for o in outs]
    assert {o[0].strip() for o in outs} == {migrations.HEAD}
    assert pg_count(pg_url, "select count(*) from alembic_version") == [(1,)]
    assert pg_count(pg_url, "select id, state, node_id from chain") == [(1, "succeeded", None)]
    store = Store(pg_url)
    with store.engine.connect() as conn:
        assert migrations.schema_diff(conn) == []


def test_busy_names_the_holder_of_this_store_not_of_another_on_the_server(ws, pg_url, pg_admin):
    """Advisory locks are per database: a worker of another store on the same server (another
    project, or a concurrent test) must not be named as this store's holder."""
    other = f"opsdctl_t_{uuid.uuid4().hex[:12]}"
    with pg_admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{other}"')
    other_url = make_url(pg_url).set(database=other).render_as_string(hide_password=False)
    try:
        pg_workspace(ws, pg_url)
        cfg = load_config(ws.root / "opsdctl.toml")
        holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""\
            import sys, time
            from opsdctl.config import load_config
            from opsdctl.store.engine import open_store
            from opsdctl.store.locks import worker_lock
            with worker_lock(load_config({str(ws.root / "opsdctl.toml")!r}), open_store({other_url!r})):
                print("held", flush=True)
                time.sleep(60)
            """)], stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "held"
            store_a, store_b = open_store(pg_url), open_store(pg_url)
            with worker_lock(cfg, store_a):
                with pytest.raises(WorkerBusy) as busy:
                    with worker_lock(cfg, store_b):
                        pass
            assert f"pid {os.getpid()} on " in str(busy.value), str(busy.value)
        finally:
            holder.kill()
            holder.wait()
    finally:
        with pg_admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{other}" WITH (FORCE)')


def test_status_and_compare_documents_are_the_same_on_postgresql_and_sqlite(pg_url, tmp_path):
    """The reader's SQLAlchemy driver on PostgreSQL (decoded JSON, timestamptz, real booleans) gives
    the documents the sqlite3 driver gives for the same rows: status, compare, show and chain."""
    from store_fill import fill_store
    from unit.store.test_reader import documents, run_documents

    from opsdctl.store.open_read import open_reader
    from opsdctl.store.reader import SqlAlchemyDriver, SqliteDriver

    from opsdctl.store.values import utcnow

    docs, now = [], utcnow().replace(microsecond=123456)
    for name, url in (("pg", pg_url), ("sqlite", None)):
        root = tmp_path / name
        root.mkdir()
        config = default_config(budget="hours = 6")
        if url:
            config = config.replace('db = "sqlite:///runs.db"', f"db = {json.dumps(url)}")
        (root / "opsdctl.toml").write_text(config)
        cfg = load_config(root / "opsdctl.toml")
        store = open_store(cfg.db)
        fill_store(store, now)
        reader = open_reader(cfg.db)
        assert isinstance(reader.driver, SqlAlchemyDriver if url else SqliteDriver)
        docs.append((documents(cfg, reader), run_documents(reader)))
        store.dispose()
    assert docs[0] == docs[1]


def test_the_dashboard_reads_a_postgresql_store(ws, pg_url):
    """`serve` on a PostgreSQL store: its pages read through a Reader on the store's engine (the
    variant and chain pages' JSON is show's and chain's), and name the store without its password."""
    import socket
    import urllib.request

    from store_fill import fill_store
    from unit.store.test_reader import steady

    pg_workspace(ws, pg_url)
    store = open_store(load_config(ws.root / "opsdctl.toml").db)
    fill_store(store)
    store.dispose()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([*opsdctl_argv(), "serve", "--port", str(port)], cwd=ws.root, env=clean_env(ws.env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def get(path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
            return r.read().decode()

    def up():
        assert proc.poll() is None, proc.stdout.read()
        try:
            return get("/changes")
        except OSError:
            return None

    try:
        wait_for(up, timeout=60, what="opsdctl serve to answer")
        assert json.loads(get("/variant/token-clip?format=json")) == json.loads(ws.run("show", "token-clip", "--json").stdout)
        chain = json.loads(get("/chain/9?format=json"))
        assert steady(chain) == steady(json.loads(ws.run("chain", "9", "--json").stdout))
        page = get("/variant/token-clip")
        assert make_url(pg_url).render_as_string(hide_password=True) in page and secret() not in page
    finally:
        stop_process(proc)


def test_reeval_on_postgres(ws, pg_url, request):
    """`requeue --reeval` and what auto-repeat reads for it (plan.reeval's queries, the planner's
    latest training) on PostgreSQL; compare pools the two evals as one run."""
    from opsdctl.plan.store_facts import StoreFacts
    from opsdctl.plan.reeval import Target
    from tests.integration.test_reeval import our_evaluator_shim

    pg_workspace(ws, pg_url, eval=our_evaluator_shim(ws))
    ws.cli("queue", "token-clip")
    ws.run("worker", "--drain")
    cfg = load_config(ws.root / "opsdctl.toml")
    store = open_store(cfg.db)
    facts = StoreFacts(cfg, store)
    request.addfinalizer(lambda: (facts.reader.close(), store.engine.dispose()))  # before the database is dropped
    assert facts.reeval_targets(facts.runs()) == {"token-clip": Target("token-clip", 1, 1)}
    assert facts.latest_training().chain_id == 1
    assert ws.cli_json("requeue", "1", "--reeval")["eval_draw"] == 1
    ws.run("worker", "--drain")
    assert pg_count(pg_url, "select id, eval_draw, trained_by from chain order by id") == [(1, 0, None), (2, 1, 1)]
    (tc,) = [e for e in ws.cli_json("compare")["variants"] if e["name"] == "token-clip"]
    assert tc["n"] == 1 and tc["chain_ids"] == [1]
    assert facts.reeval_targets(facts.runs()) == {"token-clip": Target("token-clip", 1, 2)}
