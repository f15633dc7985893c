#!/usr/bin/env bash
# Sourced by .ci/run: makes sure a PostgreSQL server runs on 127.0.0.1:5432 with a `rewind_test` database
# and exports REWIND_TEST_POSTGRES_URL, so the Postgres runs of the test suites happen and are not skipped.
set -euo pipefail

if ! command -v pg_ctlcluster >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql postgresql-client >/dev/null
fi

pg_version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -q "^$pg_version main$"; then
  pg_createcluster "$pg_version" main >/dev/null
fi
if ! pg_lsclusters -h | awk -v v="$pg_version" '$1==v && $2=="main" {print $4}' | grep -q online; then
  pg_ctlcluster "$pg_version" main start
fi
for _ in $(seq 1 30); do
  su postgres -c "pg_isready -q -h 127.0.0.1 -p 5432" && break
  sleep 1
done
su postgres -c "psql -q -v ON_ERROR_STOP=1 -d postgres" <<'SQL' >/dev/null
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'rewind') THEN
    CREATE ROLE rewind LOGIN PASSWORD 'rewind' CREATEDB;
  END IF;
END $$;
SQL
if ! su postgres -c "psql -tA -d postgres -c \"SELECT 1 FROM pg_database WHERE datname = 'rewind_test'\"" | grep -q 1; then
  su postgres -c "createdb -O rewind rewind_test"
fi
export REWIND_TEST_POSTGRES_URL="postgres://rewind:rewind@127.0.0.1:5432/rewind_test"
echo "PostgreSQL $pg_version ready: $REWIND_TEST_POSTGRES_URL"
