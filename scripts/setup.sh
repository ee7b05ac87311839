#!/usr/bin/env bash
# Set up a fresh Debian 12 machine (run as root): Docker engine, debootstrap, the venv, and
# the offline base images (via `bench doctor --fix`). Safe to run again: it skips what is done.
set -euo pipefail

cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
export DEBIAN_FRONTEND=noninteractive

say() { printf '==> %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/setup.sh installs packages and starts dockerd: run it as root" >&2
    exit 1
fi

# --- system packages: only touch apt when something is missing -------------------------------
# From Debian 13 (trixie), pinned at priority 100 so that every other package stays on bookworm:
# - Docker engine 26 (docker.io, docker-cli, docker-buildx): the 20.10 engine that Debian 12
#   ships has no Dockerfile heredocs (RUN <<EOF), which real task sets use;
# - Docker Compose v2 (docker-compose 2.x, the `docker compose` plugin; bookworm has only the
#   Python 1.29): runs multi-container tasks (environment/docker-compose.yaml).
apt_log=/var/log/benchflow-setup-apt.log
engine_major() { dockerd --version 2>/dev/null | sed -n 's/^Docker version \([0-9]*\).*/\1/p'; }
trixie=()
if [ "$(engine_major)" = "" ] || [ "$(engine_major)" -lt 23 ]; then
    trixie+=(docker.io docker-cli docker-buildx)
fi
docker compose version >/dev/null 2>&1 || trixie+=(docker-compose)
if [ "${#trixie[@]}" -gt 0 ]; then
    if [ ! -f /etc/apt/sources.list.d/benchflow-trixie.sources ]; then
        say "adding Debian trixie (pinned at priority 100) for ${trixie[*]}"
        mirror=$(sed -n 's/^URIs: *\(http[^ ]*\/debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
        cat >/etc/apt/sources.list.d/benchflow-trixie.sources <<SRC
Types: deb
URIs: ${mirror:-http://deb.debian.org/debian}
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
        printf 'Package: *\nPin: release n=trixie\nPin-Priority: 100\n' >/etc/apt/preferences.d/benchflow-trixie
    fi
    say "installing ${trixie[*]} from trixie (log: $apt_log)"
    if [[ " ${trixie[*]} " == *" docker.io "* ]]; then
        pkill -x dockerd 2>/dev/null && sleep 3 || true
    fi
    if ! { apt-get update -q && apt-get install -y -q --no-install-recommends -t trixie "${trixie[@]}"; } >>"$apt_log" 2>&1; then
        tail -n 20 "$apt_log" >&2
        echo "installing ${trixie[*]} from trixie failed; see $apt_log" >&2
        exit 1
    fi
fi
packages=()
command -v debootstrap >/dev/null 2>&1 || packages+=(debootstrap)
command -v npm >/dev/null 2>&1 || packages+=(npm)  # fetches the agent CLIs (claude, opencode, codex)
# the dashboard's browser tests: Debian's chromium, driven by the playwright Python package (its
# own browser download is never used: no such host is reachable)
command -v chromium >/dev/null 2>&1 || packages+=(chromium)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || packages+=(python3-venv)
if [ "${#packages[@]}" -gt 0 ]; then
    say "installing ${packages[*]} (log: $apt_log)"
    # Lists may be absent (fresh image) or stale: update only when installing fails.
    if ! apt-get install -y -q --no-install-recommends "${packages[@]}" >"$apt_log" 2>&1; then
        if ! { apt-get update -q && apt-get install -y -q --no-install-recommends "${packages[@]}"; } >>"$apt_log" 2>&1; then
            tail -n 20 "$apt_log" >&2
            echo "installing ${packages[*]} failed; see $apt_log" >&2
            exit 1
        fi
    fi
fi

# --- Docker engine: there is no systemd here, so start dockerd directly ----------------------
if ! docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
    say "starting dockerd (log: /var/log/dockerd.log)"
    nohup dockerd >/var/log/dockerd.log 2>&1 &
    for _ in $(seq 1 120); do
        docker version --format '{{.Server.Version}}' >/dev/null 2>&1 && break
        sleep 0.5
    done
    if ! docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
        echo "dockerd did not answer within 60 s; last lines of /var/log/dockerd.log:" >&2
        tail -n 20 /var/log/dockerd.log >&2 || true
        exit 1
    fi
fi
say "docker engine $(docker version --format '{{.Server.Version}}')"

# --- Python environment ----------------------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
    say "creating .venv with $(python3 --version)"
    python3 -m venv .venv
fi
stamp=.venv/.benchflow-installed
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || ! .venv/bin/python -c 'import runs, docker' >/dev/null 2>&1; then
    say "pip install -e '.[dev]'"
    .venv/bin/python -m pip install -q -e '.[dev]'
    echo "$want" >"$stamp"
fi

# --- Harbor in its own venv (it needs Python 3.12): the tests read job folders Harbor wrote and
# check `bench export --format harbor` with Harbor's own code (tests/runs/test_export_harbor.py)
harbor_version=0.26.0
if [ "$(cat .venv-harbor/.benchflow-installed 2>/dev/null)" != "$harbor_version" ]; then
    py312=""  # python3.12 on PATH (a pyenv shim may name one it cannot run), else pyenv's own
    for candidate in python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python; do
        if "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1; then
            py312=$candidate
            break
        fi
    done
    if [ -z "$py312" ]; then
        echo "warning: no Python 3.12 (python3.12 on PATH or under pyenv): .venv-harbor not made;" \
            "the Harbor tests fail until it is (install Python 3.12, then run this again)" >&2
    else
        say "creating .venv-harbor with harbor==$harbor_version ($("$py312" --version))"
        rm -rf .venv-harbor
        "$py312" -m venv .venv-harbor
        .venv-harbor/bin/python -m pip install -q "harbor==$harbor_version"
        echo "$harbor_version" >.venv-harbor/.benchflow-installed
    fi
fi

# --- doctor --fix: builds the offline base images when missing or out of date ----------------
say "bench doctor --fix"
if [ -x .venv/bin/bench ] && .venv/bin/bench doctor --help >/dev/null 2>&1; then
    exec .venv/bin/bench doctor --fix
fi
exec .venv/bin/python -c 'from runs.doctor import run_doctor; import sys; sys.exit(run_doctor(fix=True))'
