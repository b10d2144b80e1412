#!/bin/sh
# First start: make the cluster, the role and the database, as the official image's entrypoint does.
set -eu
: "${POSTGRES_USER:?}" "${POSTGRES_PASSWORD:?}" "${POSTGRES_DB:?}" "${PGPORT:?}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    printf '%s\n' "$POSTGRES_PASSWORD" >/tmp/pwfile
    initdb --username="$POSTGRES_USER" --pwfile=/tmp/pwfile --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    rm -f /tmp/pwfile
    pg_ctl -o "-c listen_addresses='' -k /var/run/postgresql" -w start >/dev/null
    psql -v ON_ERROR_STOP=1 --username="$POSTGRES_USER" --dbname=postgres \
        -c "CREATE DATABASE \"$POSTGRES_DB\"" >/dev/null
    pg_ctl -m fast -w stop >/dev/null
fi
# `postgres -c name=value ...` from the compose file's command, as the official image takes it.
if [ "${1:-}" = postgres ]; then shift; fi
exec postgres "$@" -c listen_addresses=127.0.0.1 -c port="$PGPORT" -c unix_socket_directories=/var/run/postgresql
