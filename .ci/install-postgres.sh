#!/usr/bin/env bash
# Idempotent: make sure PostgreSQL's server binaries (initdb, pg_ctl) are installed, from
# Debian's packages where missing. The PostgreSQL metastore tests start their own private
# cluster with them (tests/services.py); nothing is started here.
set -euo pipefail
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "PostgreSQL is missing: install it (Debian: apt-get install postgresql) for the PostgreSQL tests" >&2
    exit 0
fi
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql
