#!/usr/bin/env bash
# A throwaway PostgreSQL server for opsdctl's `postgres` tests.
#
#   eval "$(.ci/postgres.sh)"     # install if needed, start, print `export OPSDCTL_TEST_PG_URL=...`
#   .ci/postgres.sh stop          # stop it
#
# - Installs Debian's postgresql packages when no server binaries are found (apt-get,
#   non-interactive; as root, or through passwordless sudo).
# - Creates a cluster in $OPSDCTL_PG_DIR (default /tmp/opsdctl-pg) that listens on
#   127.0.0.1:$OPSDCTL_PG_PORT (default 55432) only, with its socket in that directory. It runs as
#   the `postgres` system user when this script runs as root (initdb and postgres refuse root), as
#   the current user otherwise. Durability is off (fsync): it is a test server.
# - Creates the role `opsdctl` (LOGIN CREATEDB, a random password kept in the cluster directory,
#   scram-sha-256 over TCP) and its database `opsdctl_test`. The tests create and drop one
#   database per test, hence CREATEDB.
# - Idempotent: a second run reuses the cluster, starts it if it is down, prints the same URL.
# Only the final export line goes to stdout; everything else goes to stderr.
set -euo pipefail

DIR=${OPSDCTL_PG_DIR:-/tmp/opsdctl-pg}
PORT=${OPSDCTL_PG_PORT:-55432}
ROLE=opsdctl
DB=opsdctl_test

log() { echo "postgres.sh: $*" >&2; }

find_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi
}

BIN=$(find_bin)
if [ -z "$BIN" ] || [ ! -x "$BIN/initdb" ]; then
    log "installing Debian's postgresql packages"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        postgresql postgresql-client >&2
    BIN=$(find_bin)
fi
[ -x "$BIN/initdb" ] || { log "no initdb under /usr/lib/postgresql/*/bin after installing"; exit 1; }

# Run the server tools as the postgres system user when we are root.
if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || { log "no 'postgres' system user (the Debian package creates it)"; exit 1; }
    # runuser lives in /usr/sbin, which a minimal PATH (env -i, some CI images) leaves out
    RUNUSER=$(PATH="$PATH:/usr/sbin:/sbin" command -v runuser) || { log "no runuser (util-linux) to run the server as postgres"; exit 1; }
    RUN=("$RUNUSER" -u postgres --)
else
    RUN=()
fi
pg() { "${RUN[@]}" "$@"; }

if [ "${1:-}" = stop ]; then
    if [ -f "$DIR/PG_VERSION" ]; then pg "$BIN/pg_ctl" -D "$DIR" -m fast -w stop >&2 || true; fi
    exit 0
fi

if [ ! -f "$DIR/PG_VERSION" ]; then
    log "creating a cluster in $DIR"
    mkdir -p "$DIR"
    chmod 700 "$DIR"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$DIR"
    pg "$BIN/initdb" -D "$DIR" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 --no-locale >&2
    cat >>"$DIR/postgresql.conf" <<EOF
# opsdctl test server (.ci/postgres.sh)
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$DIR'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
fi

if ! pg "$BIN/pg_ctl" -D "$DIR" status >/dev/null 2>&1; then
    log "starting the server on 127.0.0.1:$PORT"
    pg "$BIN/pg_ctl" -D "$DIR" -l "$DIR/server.log" -w -t 60 start >&2 || {
        log "the server did not start; the end of $DIR/server.log:"
        tail -n 20 "$DIR/server.log" >&2 || true
        exit 1
    }
fi

PWFILE="$DIR/opsdctl.password"
if [ ! -s "$PWFILE" ]; then
    (umask 077 && od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$PWFILE")
fi
PASSWORD=$(cat "$PWFILE")

pg "$BIN/psql" -h "$DIR" -p "$PORT" -U postgres -d postgres -X -q -v ON_ERROR_STOP=1 >&2 <<SQL
DO \$\$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') THEN
        CREATE ROLE $ROLE LOGIN CREATEDB;
    END IF;
END \$\$;
ALTER ROLE $ROLE PASSWORD '$PASSWORD';
SELECT 'CREATE DATABASE $DB OWNER $ROLE' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$DB')
\gexec
SQL

log "ready: role $ROLE, database $DB on 127.0.0.1:$PORT"
echo "export OPSDCTL_TEST_PG_URL=postgresql+psycopg://$ROLE:$PASSWORD@127.0.0.1:$PORT/$DB"
