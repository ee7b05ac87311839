"""Hole 8 of issue 28: transport and settings. `bench serve` behind TLS (its own, or a proxy's):
Secure cookies, HSTS, plain HTTP redirected; Django's deploy checks clean for such a set-up; a
secret key that cannot be read is an error; logged-in pages are not stored by caches; plain HTTP
beyond loopback is refused unless asked for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_bench
from tests.security.site import Site, bench_env, self_signed, set_cookies


@pytest.fixture
def env(tmp_path, bench_database):
    return bench_env(tmp_path, bench_database)


def test_bench_serve_over_its_own_tls_sets_secure_cookies_hsts_and_no_store(tmp_path, env):
    # given bench serve with a certificate
    site = Site(tmp_path / "site", env, users={"carol": "viewer"}, tls=self_signed(tmp_path))
    try:
        client = site.client()
        # when carol logs in over HTTPS
        page = client.get("/login/")
        answer = site.login(client, "carol")
        jobs = client.get("/jobs/")
    finally:
        site.stop()
    # then HSTS, cookies only over HTTPS, and her pages kept by no cache
    assert page.headers["strict-transport-security"].startswith("max-age=")
    assert "; Secure" in set_cookies(page)["csrftoken"]
    assert answer.status_code == 302 and "; Secure" in set_cookies(answer)["sessionid"]
    assert jobs.status_code == 200 and "no-store" in jobs.headers["cache-control"]


def test_behind_a_tls_proxy_plain_http_is_redirected_and_https_gets_hsts(tmp_path, env):
    env = {**env, "BENCHFLOW_FORWARDED_PROTO_HEADER": "X-Forwarded-Proto"}
    site = Site(tmp_path / "site", env)
    try:
        plain = site.client(**{"X-Forwarded-Proto": "http"}).get("/login/")
        secure = site.client(**{"X-Forwarded-Proto": "https"}).get("/login/")
    finally:
        site.stop()
    assert plain.status_code == 301
    assert plain.headers["location"] == f"https://127.0.0.1:{site.port}/login/"
    assert secure.status_code == 200 and "strict-transport-security" in secure.headers
    assert "; Secure" in set_cookies(secure)["csrftoken"]


def test_django_deploy_checks_are_clean_for_a_bench_serve_tls_setup(tmp_path, env):
    # as bench serve --tls-cert sets it up: a login asked, TLS
    served = {**env, "BENCHFLOW_LOGIN_REQUIRED": "1", "BENCHFLOW_TLS": "1"}
    done = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "check", "--deploy", "--fail-level", "WARNING"],
        env=served,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout
    # and bench serve's own --check says the same for its set-up
    cert, key = self_signed(tmp_path)
    check = run_bench(
        ["serve", "--tls-cert", str(cert), "--tls-key", str(key), "--check"], env=env, cwd=tmp_path
    )
    assert check.returncode == 0 and "no issues" in check.stdout, check.stdout + check.stderr


def test_a_secret_key_that_cannot_be_read_is_a_clear_error(tmp_path, env):
    # given a state folder whose secret key is not a readable file
    state = Path(env["BENCHFLOW_HOME"])
    (state / "secret-key").mkdir(parents=True)
    # when any bench command sets Django up
    done = run_bench(["user", "list"], env=env, cwd=tmp_path)
    # then it stops, naming the file and the fix, and no constant key is used
    assert done.returncode != 0
    assert str(state / "secret-key") in done.stderr and "BENCHFLOW_SECRET_KEY" in done.stderr
    assert "Traceback" not in done.stderr and "unexpected error" not in done.stderr


def test_plain_http_beyond_loopback_is_refused_without_insecure(tmp_path, env):
    # (--check: the answer comes before anything would listen)
    done = run_bench(["serve", "--host", "0.0.0.0", "--check"], env=env, cwd=tmp_path)
    assert done.returncode != 0 and "in clear" in done.stderr and "--tls-cert" in done.stderr
    allowed = run_bench(
        ["serve", "--host", "0.0.0.0", "--insecure", "--check"], env=env, cwd=tmp_path
    )
    assert "in clear" not in allowed.stderr  # asked for: the deploy checks run (and warn)
    assert "SESSION_COOKIE_SECURE" in allowed.stdout + allowed.stderr
