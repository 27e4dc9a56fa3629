"""Secrets in a shared lab: no stage sees the store's credentials (PGPASSWORD, a variable holding
the password or the store URL), a password with an unencoded '@' is masked whole, and every file
opsdctl writes honours the umask (opsdctl.toml, recipe.env / recipe.json of a run, export -o, the
snapshot's read-only copies) while a file written over keeps its own mode. Real CLI, real worker,
real subprocess stages, real SQLite store."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from conftest import clean_env, default_config, opsdctl_argv

from opsdctl.store.credentials import mask_url, redact, scrub_env

PASSWORD = "Pa55@Tail88d241"
URL = f"postgresql+psycopg://u:{PASSWORD}@127.0.0.1:1/db"
DUMP = "import json, os, sys; json.dump(dict(os.environ), open(os.path.join(sys.argv[1], 'env.json'), 'w'))"


def test_a_password_with_an_unencoded_at_is_masked_whole():
    assert mask_url(URL) == "postgresql+psycopg://u:***@127.0.0.1:1/db"
    assert mask_url("postgresql://u@h/db") == "postgresql://u@h/db" and mask_url("sqlite:///a@b.db") == "sqlite:///a@b.db"
    assert "Tail88d241" not in redact(f"could not connect: password for u:{PASSWORD} at Tail88d241@127.0.0.1", URL)
    env = {"PGPASSWORD": PASSWORD, "DATABASE_URL": URL, "COPY": f"x{PASSWORD}y", "PGPASSFILE": "/p", "KEEP": "1",
           "URL_NO_PW": "postgresql+psycopg://u:***@127.0.0.1:1/db"}
    assert scrub_env(env, URL) == {"KEEP": "1"}


def test_the_cli_never_prints_the_password(ws):
    ws.write_config(default_config().replace('db = "sqlite:///runs.db"', f'db = "{URL}"'))
    proc = ws.run("status", check=False, env={"PGCONNECT_TIMEOUT": "2"})
    assert proc.returncode == 2 and "Tail88d241" not in proc.stdout + proc.stderr
    assert "u:***@127.0.0.1" in proc.stderr


def test_no_stage_sees_the_store_credentials(ws):
    ws.write_config(default_config(train=f"{sys.executable} -c {json.dumps(DUMP)} {{stage_dir}}"
                                   " && mkdir {stage_dir}/checkpoint-final"))
    ws.cli("queue", "baseline")
    secret_env = {"PGPASSWORD": "hunter2-secret", "DATABASE_PASSWORD": "hunter2-secret", "PGPASSFILE": "/x/.pgpass",
                  "KEEP_ME": "visible"}
    ws.run("worker", "--drain", env=secret_env)
    env = json.loads((ws.runs / "1" / "train" / "env.json").read_text())
    assert env["KEEP_ME"] == "visible" and env["OPSDCTL_CHAIN_ID"] == "1"
    assert not {"PGPASSWORD", "DATABASE_PASSWORD", "PGPASSFILE"} & set(env)
    assert "hunter2-secret" not in json.dumps(env)


def _run(cwd, *args, umask=0o077):
    return subprocess.run([*opsdctl_argv(), *map(str, args)], cwd=cwd, env=clean_env(), capture_output=True,
                          text=True, preexec_fn=lambda: os.umask(umask), timeout=120)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_files_honour_the_umask_and_keep_an_existing_mode(ws, tmp_path):
    fresh = tmp_path / "fresh"
    assert _run(tmp_path, "init", "--dir", fresh).returncode == 0
    assert _mode(fresh / "opsdctl.toml") == 0o600

    ws.write_config(default_config(snapshot=True))
    (ws.root / "method.py").write_text("X = 1\n")
    for args in (("queue", "baseline"), ("worker", "--drain")):
        proc = _run(ws.root, *args)
        assert proc.returncode == 0, proc.stderr
    for name in ("recipe.env", "recipe.json"):
        assert _mode(ws.runs / "1" / name) == 0o600, name
    key = ws.sql("select key from code_snapshot")[0][0]
    assert _mode(ws.runs / "code" / key / "method.py") == 0o400  # read-only, and private

    out = tmp_path / "recipe.env"
    assert _run(ws.root, "export-recipe", "baseline", "-o", out).returncode == 0
    assert _mode(out) == 0o600
    private = tmp_path / "private.env"
    private.write_text("")
    os.chmod(private, 0o600)
    assert _run(ws.root, "export-recipe", "baseline", "-o", private, umask=0o022).returncode == 0
    assert _mode(private) == 0o600 and private.read_text()  # written over, still private
    assert _run(ws.root, "export-recipe", "baseline", "-o", tmp_path / "open.env", umask=0o022).returncode == 0
    assert _mode(tmp_path / "open.env") == 0o644


@pytest.mark.postgres
def test_no_stage_sees_a_postgres_stores_password(ws):
    url = os.environ.get("OPSDCTL_TEST_PG_URL")
    if not url:
        pytest.skip('OPSDCTL_TEST_PG_URL is not set (eval "$(.ci/postgres.sh)" starts a local server and sets it)')
    import uuid

    import sqlalchemy as sa
    from sqlalchemy.engine import make_url

    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    name = f"opsdctl_t_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        db = make_url(url).set(database=name).render_as_string(hide_password=False)
        password = make_url(url).password
        train = f"{sys.executable} -c {json.dumps(DUMP)} {{stage_dir}} && mkdir {{stage_dir}}/checkpoint-final"
        ws.write_config(default_config(train=train).replace('db = "sqlite:///runs.db"', f"db = {json.dumps(db)}"))
        ws.cli("queue", "baseline")
        ws.run("worker", "--drain", env={"PGPASSWORD": password, "MY_DB": db})
        env = json.loads((ws.runs / "1" / "train" / "env.json").read_text())
        assert password not in json.dumps(env) and "MY_DB" not in env and "PGPASSWORD" not in env
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()
