#!/usr/bin/env bash
# The services the test suite needs besides Docker, started when none answers (run as root):
# Redis on 127.0.0.1:6379 (scale-out: the broker of `bench worker`), and PostgreSQL on
# 127.0.0.1:5432 with trust auth for local TCP (the suite's second run). Machines that already
# run them are left alone.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
say() { printf '==> %s\n' "$*"; }
install() {
    apt-get install -y -q --no-install-recommends "$@" >>/var/log/benchflow-setup-apt.log 2>&1 ||
        { apt-get update -q && apt-get install -y -q --no-install-recommends "$@"; } >>/var/log/benchflow-setup-apt.log 2>&1
}
answers() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# the scale-out tests also start redis-servers of their own (one they may restart)
command -v redis-server >/dev/null 2>&1 || { say "installing redis-server"; install redis-server; }
if ! answers 6379; then
    say "starting Redis on 127.0.0.1:6379"
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no
    for _ in $(seq 1 50); do answers 6379 && break; sleep 0.1; done
fi
say "redis $(redis-cli -h 127.0.0.1 -p 6379 ping)"

if ! answers 5432; then
    if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
        say "installing postgresql"
        install postgresql
    fi
    version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
    [ -d "/etc/postgresql/$version/main" ] || pg_createcluster "$version" main >/dev/null
    hba="/etc/postgresql/$version/main/pg_hba.conf"
    if ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
        # tests connect as postgres over TCP without a password, as on the CI machines
        sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
    fi
    say "starting PostgreSQL $version on 127.0.0.1:5432"
    pg_ctlcluster "$version" main start
    for _ in $(seq 1 100); do answers 5432 && break; sleep 0.1; done
fi
answers 5432 && say "postgresql answers on 127.0.0.1:5432"
